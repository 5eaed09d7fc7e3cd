"""Matrix cells -> validated configs, composed by Hydra once per overlay set.

One Hydra compose per overlay set loads every option of every group axis the cells name, each
at its own package (`+platform@__matrix.platform.sm90=sm90`), with the default options of those
groups removed (`~platform`): Hydra itself composes each option (defaults lists, interpolations,
`@package`), and what the overlays write into the environment sections stays behind as a patch,
applied on top of every cell as Hydra's own order would (group option, then overlays, then
command-line keys). Composed dicts are kept per process, keyed by the conf files' sizes and mtimes. Each section is validated once per distinct variant with the schema's
section models, and a cell is `base.model_copy(update=...)` of one fully validated config, so all
cells share the rules object and its compiled rulebook; the schema's cross-section checks
(`KSelectConfig.check_cross_sections`) run once per distinct combination. The test suite checks
that every cell equals a full `compose(cell.overrides())`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..config.compose import CONF_DIR, compose_raw
from ..review.cells import FIELD_AXES, GROUP_AXES, SECTIONS, Cell, MatrixError, hydra_value
from ..base.errors import KSelectError, format_validation_error
from ..base.files import group_options
from ..config.schema import AnyModel, AttentionPins, KSelectConfig, KVCache, Objective, Platform, SpecDecode
from ..config.releases import default_rules  # noqa: F401 - the conf tree's default rules option

class _Model:
    """The model section: a Gemma-4 preset or an `architecture: hf` one (schema.AnyModel, discriminated)."""

    model_validate = staticmethod(TypeAdapter(AnyModel).validate_python)


SECTION_MODELS: dict[str, type[BaseModel] | type[_Model]] = {
    "platform": Platform, "model": _Model, "kv_cache": KVCache, "spec_decode": SpecDecode, "attention": AttentionPins,
    "objective": Objective,
}  # fmt: skip
OPTIONS = "__matrix"  # where one compose holds every option of the group axes


def _deep_merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _set_path(d: dict, path: Sequence[str], value: Any) -> dict:
    if len(path) == 1:
        return {**d, path[0]: value}
    sub = d.get(path[0])
    return {**d, path[0]: _set_path(sub if isinstance(sub, dict) else {}, path[1:], value)}


_COMPOSED: dict[tuple, dict] = {}  # read-only composed dicts (builders copy what they change)


def _fingerprint(conf_dir: Path) -> tuple:
    """The conf directory's YAML files as (path, size, mtime): a changed file composes anew."""
    return (str(conf_dir.resolve()),) + tuple(
        sorted((str(p.relative_to(conf_dir)), st.st_size, st.st_mtime_ns) for p in conf_dir.rglob("*.yaml") for st in [p.stat()])
    )


class Builder:
    """Turns cells into validated configs; one per conf directory (the worktree, a git revision)."""

    def __init__(self, conf_dir: Path | str = CONF_DIR, extra: Sequence[str] = ()):
        """extra: Hydra overrides composed into every cell (e.g. `objective=latency` for a diff side)."""
        self.extra = tuple(extra)
        self.conf_dir = Path(conf_dir)
        self._composed = _COMPOSED  # shared by builders: keyed by the conf files' names, sizes and mtimes

    def composed(self, overlays: Sequence[str], options: dict[str, Sequence[str]]) -> dict:
        """One Hydra compose for an overlay set: rules, capabilities, attention, every option of
        `options` ({group: names}) under OPTIONS, and the overlays' writes into those groups."""
        key = (_fingerprint(self.conf_dir), self.extra, tuple(overlays), tuple((g, tuple(sorted(n))) for g, n in options.items()))
        if key not in self._composed:
            over = [f"~{g}" for g in options] + list(self.extra)
            over += [f"+{g}@{OPTIONS}.{g}.{name}={name}" for g, names in options.items() for name in sorted(names)]
            if overlays:
                over.append(f"overlay=[{','.join(overlays)}]")
            avail = {g: group_options(self.conf_dir, g) for g in options}
            missing = [f"{g}={n!r}" for g, names in options.items() for n in names if n not in avail[g]]
            if missing:
                raise MatrixError(f"matrix names {', '.join(missing)}, which {self.conf_dir} lacks; available: {avail}")
            if len(self._composed) > 32:
                self._composed.clear()
            try:
                self._composed[key] = compose_raw(over, self.conf_dir)
            except KSelectError:
                # an option that interpolates the root (`${model.x}`) only resolves at its own
                # package: compose each option in a config of its own (slower, same result)
                self._composed[key] = self._one_by_one(overlays, options)
        return self._composed[key]

    def _one_by_one(self, overlays: Sequence[str], options: dict[str, Sequence[str]]) -> dict:
        ov = [f"overlay=[{','.join(overlays)}]"] if overlays else []
        raw = compose_raw([*(f"~{g}" for g in options), *ov, *self.extra], self.conf_dir)
        raw[OPTIONS] = {g: {n: compose_raw([f"{g}={n}", *ov], self.conf_dir)[g] for n in names} for g, names in options.items()}
        return raw

    def under_rules(self, rules: str | None) -> Builder:
        """This builder with a cell's rules option as an extra override (it replaces one in `extra`)."""
        if not rules:
            return self
        return Builder(self.conf_dir, [x for x in self.extra if not x.startswith("rules=")] + [f"rules={rules}"])

    def configs(self, cells: Sequence[Cell]) -> Iterator[tuple[Cell, KSelectConfig]]:
        """(cell, validated config) for each cell; cells of one overlay set share one compose."""
        by_ov: dict[tuple, list[Cell]] = {}
        for c in cells:
            by_ov.setdefault((c.rules, c.overlays), []).append(c)
        done: dict[Cell, KSelectConfig] = {}
        for (rules, ov), group in by_ov.items():
            for c, cfg in self.under_rules(rules)._configs_one_set(group, ov):
                done[c] = cfg
        for c in cells:
            yield c, done[c]

    def _configs_one_set(self, cells: list[Cell], overlays: tuple[str, ...]) -> Iterator[tuple[Cell, KSelectConfig]]:
        if not cells:
            return
        declared = [g for g in GROUP_AXES if getattr(cells[0], g) is not None]
        raw = self.composed(overlays, {g: {getattr(c, g) for c in cells} for g in declared})
        sections: dict[tuple, BaseModel] = {}
        cross_ok: set[tuple] = set()
        base: KSelectConfig | None = None
        for cell in cells:
            keys = _section_keys(cell)
            update = {}
            for s, key in zip(SECTIONS, keys):
                m = sections.get(key)
                if m is None:
                    m = sections[key] = self._section(raw, cell, s)
                update[s] = m
            if base is None:
                base = self._base_config(raw, cell, update)
            cfg = base.model_copy(update=update)
            if keys not in cross_ok:  # the schema's cross-section checks, once per combination
                try:
                    cfg.check_cross_sections()
                except ValueError as e:
                    raise MatrixError(_not_valid(cell, str(e))) from None
                cross_ok.add(keys)
            yield cell, cfg

    def _section(self, raw: dict, cell: Cell, s: str) -> BaseModel:
        """Section `s` of a cell's config: its group option (or the composed section), its field axes and pins."""
        name = getattr(cell, s) if s in GROUP_AXES else None
        if name is not None:
            data = _deep_merge(raw[OPTIONS][s][name], raw.get(s) or {})
        else:
            data = raw.get(s)
            if data is None and s == "objective":
                data = {}  # a conf/ revision from before the objective key: faithful selection
            if data is None:
                raise MatrixError(f"the composed config has no {s!r} section")
        for a, (sec, f) in FIELD_AXES.items():
            if sec == s and getattr(cell, a) is not None:
                data = {**data, f: getattr(cell, a)}
        for k, v in cell.pin_sets:
            if k.split(".")[0] == s:
                data = _set_path(data, k.split(".")[1:], v)
        if s == "platform" and data.get("name") == "auto":
            from ..config.detect import auto_platform  # noqa: PLC0415 - torch only for auto

            data = auto_platform(data, [f"{k}={hydra_value(v)}" for k, v in cell.pin_sets], self.conf_dir)
        try:
            return SECTION_MODELS[s].model_validate(data)
        except ValidationError as e:
            raise MatrixError(_not_valid(cell, format_validation_error(e, root=s))) from None

    def _base_config(self, raw: dict, cell: Cell, sections: dict[str, BaseModel]) -> KSelectConfig:
        """The first cell's whole config; later cells are copies of it with their own sections."""
        data = {k: v for k, v in raw.items() if k not in SECTIONS and k != OPTIONS}
        if "ruleset" not in data:  # a conf/ revision from before rules files declared what they model
            name = next((x.split("=", 1)[1] for x in self.extra if x.startswith("rules=")), None)
            data["ruleset"] = {"name": name or default_rules(self.conf_dir) or "undeclared",
                               "models": "undeclared (a conf/ revision from before `ruleset:`)"}
        data.update({s: m.model_dump() for s, m in sections.items()})
        try:
            return KSelectConfig.model_validate(data)
        except ValidationError as e:
            msg = format_validation_error(e)
            if "was written for rules=" in msg:  # the overlay set, not this cell: every cell would say so
                raise MatrixError(f"{msg.removeprefix('invalid config: ')}; a matrix runs one rules option "
                                  "(rules=<name>; the seed story's overlays: matrix=seed or seed_smoke)") from None
            raise MatrixError(_not_valid(cell, msg)) from None


def _section_keys(cell: Cell) -> tuple[tuple, ...]:
    """What each section (SECTIONS order) depends on: its group option, its field axes and the pin."""
    return (
        ("platform", cell.platform, cell.pin),
        ("model", cell.model, cell.dtype, cell.multimodal, cell.pin),
        ("kv_cache", cell.kv_cache, cell.scales, cell.pin),
        ("spec_decode", cell.spec_decode, cell.pin),
        ("attention", cell.pin),
        ("objective", cell.pin),
    )


def _not_valid(cell: Cell, msg: str) -> str:
    return (
        f"matrix cell {cell.id} is not a valid config: {msg.removeprefix('invalid config: ')}. "
        f"Declare such combinations under `skip:` in the matrix file (reproduce: {cell.command()})"
    )
