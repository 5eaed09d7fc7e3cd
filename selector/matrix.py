"""The environment matrix: a declared sweep (conf/matrix/<name>.yaml) expanded into cells and
resolved fast.

    spec = load_matrix("default")
    results = resolve_matrix(spec, overlays=["pr48666"])    # list[CellResult], matrix order

A matrix declares axes (platform × model × dtype × KV dtype × scales × spec-decode ×
multimodal), named `pins` (dotted overrides such as `attention.flash_attn_version: 3`) and
`skip` entries: combinations that are not valid configs (calibrated scales on a bf16 cache)
are skipped *by declaration*. A cell that is not a valid config and is not skipped is an
error in the matrix file, never silently dropped. A cell whose resolution raises
`SelectionError` (no valid backend, an invalid pin) is a result with outcome "invalid".

Speed: Hydra composes ONCE per overlay set, with the axis groups removed (`~platform ...`),
so the composed dict holds the rules, capabilities, attention pins and whatever the overlays
write into the environment sections (a patch applied on top of every cell, as Hydra would).
Each group file (`conf/<group>/<name>.yaml`) is read once, each section is validated once per
distinct variant with the schema's sub-models, and a cell is `base.model_copy(update=...)` of
one fully validated config, so all cells share the rules object and its compiled rulebook.
The schema's cross-section validators (pins name backends, MTP needs a drafter) run per
distinct combination. `Cell.overrides()` gives the equivalent Hydra command line; the test
suite checks that the fast path and a full Hydra compose agree.
"""

from __future__ import annotations

import functools
import gc
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .api import CONF_DIR, compose_raw
from .errors import KSelectError, SelectionError, format_validation_error
from .resolve import resolve
from .schema import KSelectConfig
from .selection import Selection

MATRIX_DIR = CONF_DIR / "matrix"

# Axes in cell order. Group axes pick a file of conf/<group>/; field axes set one key.
AXES = ("platform", "model", "dtype", "kv_cache", "scales", "spec_decode", "multimodal", "pin")
GROUP_AXES = ("platform", "model", "kv_cache", "spec_decode")
FIELD_AXES = {"dtype": ("model", "dtype"), "multimodal": ("model", "multimodal"), "scales": ("kv_cache", "scales")}
SECTIONS = ("platform", "model", "kv_cache", "spec_decode", "attention")
_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


class MatrixError(KSelectError):
    """A matrix declaration that cannot be expanded (unknown axis, a cell that is not a valid config)."""


# ---------------------------------------------------------------- declaration


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SkipRule(_Strict):
    when: dict[str, Any]
    reason: str = Field(min_length=1)


class MatrixSpec(_Strict):
    name: str = ""
    description: str = ""
    axes: dict[str, list[Any]]
    pins: dict[str, dict[str, Any]] = {"auto": {}}
    skip: list[SkipRule] = []
    overlays: list[list[str]] = [[]]  # the overlay sets tools use when none are given
    rules: str | None = None  # the rules option (conf/rules/) cells compose with; null: config.yaml's default

    @field_validator("axes")
    @classmethod
    def _axes(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        allowed = [a for a in AXES if a != "pin"]
        for name, values in v.items():
            if name not in allowed:
                raise ValueError(f"unknown axis {name!r}; allowed: {allowed} (pins go under `pins:`)")
            if not values:
                raise ValueError(f"axis {name!r} has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"axis {name!r} repeats a value: {values}")
            if name == "multimodal" and any(not isinstance(x, bool) for x in values):
                raise ValueError(f"axis 'multimodal' takes true/false, got {values}")
            if name != "multimodal" and any(not isinstance(x, str) for x in values):
                raise ValueError(f"axis {name!r} takes names, got {values}")
        for req in ("platform", "model"):
            if req not in v:
                raise ValueError(f"axis {req!r} is required")
        return v

    @field_validator("pins")
    @classmethod
    def _pins(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not v:
            raise ValueError("pins needs at least one entry (e.g. `auto: {}`)")
        for name, sets in v.items():
            if not name.replace("_", "").isalnum():
                raise ValueError(f"pin name {name!r} must be alphanumeric/underscore (it is part of cell ids)")
            for key in sets:
                if key.split(".")[0] not in SECTIONS or "." not in key:
                    raise ValueError(f"pins.{name}: {key!r} must be a dotted key under one of {list(SECTIONS)}")
        return v

    @model_validator(mode="after")
    def _skips(self) -> MatrixSpec:
        for i, s in enumerate(self.skip):
            for axis, cond in s.when.items():
                if axis not in AXES:
                    raise ValueError(f"skip[{i}].when: unknown axis {axis!r}; allowed: {list(AXES)}")
                values = self.values(axis)
                for x in cond if isinstance(cond, list) else [cond]:
                    if x not in values:
                        raise ValueError(f"skip[{i}].when.{axis}: {x!r} is not a value of the axis {values}")
        return self

    def values(self, axis: str) -> list[Any]:
        if axis == "pin":
            return list(self.pins)
        return list(self.axes.get(axis, [None]))

    @property
    def declared(self) -> tuple[str, ...]:
        """The axes this matrix varies or sets (pin always)."""
        return tuple(a for a in AXES if a == "pin" or a in self.axes)


def load_matrix(name: str | Path, conf_dir: Path | str | None = None) -> MatrixSpec:
    """`name` is a file of conf/matrix/ (without .yaml) or a path to a YAML file."""
    p = Path(name)
    if p.suffix not in (".yaml", ".yml"):
        p = (Path(conf_dir) / "matrix" if conf_dir else MATRIX_DIR) / f"{name}.yaml"
    if not p.exists():
        opts = sorted(x.stem for x in p.parent.glob("*.yaml"))
        raise MatrixError(f"no matrix {str(name)!r} (looked for {p}); available: {', '.join(opts)}")
    data = yaml.safe_load(p.read_text()) or {}
    data.setdefault("name", p.stem)
    try:
        return MatrixSpec.model_validate(data)
    except ValidationError as e:
        raise MatrixError(format_validation_error(e, root=f"matrix {p.stem}").replace("invalid config: ", "invalid matrix: ")) from None


# ---------------------------------------------------------------- cells


@dataclass(frozen=True, slots=True)
class Cell:
    """One environment of a matrix. None: the axis is not declared (the config default)."""

    platform: str
    model: str
    dtype: str | None = None
    kv_cache: str | None = None
    scales: str | None = None
    spec_decode: str | None = None
    multimodal: bool | None = None
    pin: str = "auto"
    pin_sets: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    overlays: tuple[str, ...] = ()
    rules: str | None = None  # not part of the id: one matrix run is under one rules option

    @property
    def id(self) -> str:
        """Readable and unique within a matrix, e.g. `sm90-gemma4_31b-fp8-calib-mtp-mm-fa3-pr48666`."""
        parts = [self.platform, self.model]
        if self.dtype:
            parts.append(_SHORT_DTYPE.get(self.dtype, self.dtype))
        if self.kv_cache:
            parts.append(self.kv_cache)
        if self.scales == "calibrated":
            parts.append("calib")
        if self.spec_decode and self.spec_decode != "none":
            parts.append(self.spec_decode)
        if self.multimodal:
            parts.append("mm")
        if self.pin != "auto":
            parts.append(self.pin)
        if self.overlays:
            parts.append("+".join(self.overlays))
        return "-".join(parts)

    @property
    def env_id(self) -> str:
        return replace(self, overlays=()).id

    def axis(self, name: str) -> Any:
        return getattr(self, name)

    def key(self, axes: Sequence[str] = AXES) -> tuple:
        return tuple(getattr(self, a) for a in axes)

    def with_overlays(self, overlays: Iterable[str]) -> Cell:
        return replace(self, overlays=tuple(overlays))

    def overrides(self) -> list[str]:
        """The Hydra command line (`kselect select ...`) that composes this cell."""
        o = [f"platform={self.platform}", f"model={self.model}"]
        if self.dtype:
            o.append(f"model.dtype={self.dtype}")
        if self.multimodal is not None:
            o.append(f"model.multimodal={_hydra_value(self.multimodal)}")
        if self.kv_cache:
            o.append(f"kv_cache={self.kv_cache}")
        if self.scales:
            o.append(f"kv_cache.scales={self.scales}")
        if self.spec_decode:
            o.append(f"spec_decode={self.spec_decode}")
        # a pin below a group key (attention.backend_per_kind.full_attention) may name a key the
        # group file lacks: Hydra's ++ sets it either way
        o += [f"{'++' if k.count('.') >= 2 else ''}{k}={_hydra_value(v)}" for k, v in self.pin_sets]
        if self.rules:
            o.append(f"rules={self.rules}")
        if self.overlays:
            o.append(f"overlay=[{','.join(self.overlays)}]")
        return o

    def command(self) -> str:
        return "kselect select " + " ".join(self.overrides())


def _hydra_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def skip_reason(spec: MatrixSpec, cell: Cell) -> str | None:
    for s in spec.skip:
        if all(cell.axis(a) in (c if isinstance(c, list) else [c]) for a, c in s.when.items()):
            return s.reason
    return None


def expand(spec: MatrixSpec, overlays: Iterable[str] = (), rules: str | None = None) -> list[Cell]:
    """Every non-skipped cell, in axis order (platform slowest, pin fastest), under `rules`
    (default: the rules the matrix declares, else config.yaml's)."""
    ov = tuple(overlays)
    rules = rules or spec.rules
    values = [spec.values(a) for a in AXES]
    cells = []
    for combo in itertools.product(*values):
        kw = dict(zip(AXES, combo))
        cell = Cell(**kw, pin_sets=tuple(spec.pins[kw["pin"]].items()), overlays=ov, rules=rules)
        if skip_reason(spec, cell) is None:
            cells.append(cell)
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise MatrixError(f"matrix {spec.name}: two cells share the id {dup!r}; rename a pin")
    return cells


def skipped(spec: MatrixSpec) -> list[tuple[Cell, str]]:
    """The cells the declaration skips, with the reason."""
    out = []
    for combo in itertools.product(*(spec.values(a) for a in AXES)):
        cell = Cell(**dict(zip(AXES, combo)))
        r = skip_reason(spec, cell)
        if r is not None:
            out.append((cell, r))
    return out


# ---------------------------------------------------------------- fast configs


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


_SECTION_MODELS = {s: KSelectConfig.model_fields[s].annotation for s in SECTIONS}
_CROSS_CHECKS = [d.func for d in KSelectConfig.__pydantic_decorators__.model_validators.values() if d.info.mode == "after"]


class Builder:
    """Turns cells into validated configs; one per conf directory (the worktree, a git revision)."""

    def __init__(self, conf_dir: Path | str = CONF_DIR):
        self.conf_dir = Path(conf_dir)
        self._files: dict[tuple[str, str], dict] = {}
        self._composed: dict[tuple, tuple[dict, dict]] = {}

    def group_file(self, group: str, name: str) -> dict:
        key = (group, name)
        if key not in self._files:
            path = self.conf_dir / group / f"{name}.yaml"
            if not path.exists():
                opts = sorted(p.stem for p in (self.conf_dir / group).glob("*.yaml"))
                raise MatrixError(f"matrix names {group}={name!r}, which {self.conf_dir} lacks; available: {', '.join(opts)}")
            text = path.read_text()
            data = yaml.safe_load(text) or {}
            if "defaults" in data or "${" in text or "@package" in text:
                raise MatrixError(f"{path}: the matrix loads group files directly; defaults lists, interpolations and @package are not supported")
            self._files[key] = data
        return self._files[key]

    def composed(self, overlays: Sequence[str], groups: Sequence[str], rules: str | None = None) -> dict:
        """compose_raw once per (rules, overlay set, removed groups): rules, capabilities, attention,
        and the overlays' writes into the removed environment groups (a patch)."""
        key = (tuple(overlays), tuple(groups), rules)
        if key not in self._composed:
            over = [f"~{g}" for g in groups] + ([f"rules={rules}"] if rules else [])
            if overlays:
                over.append(f"overlay=[{','.join(overlays)}]")
            self._composed[key] = compose_raw(over, self.conf_dir)
        return self._composed[key]

    def configs(self, cells: Sequence[Cell]) -> Iterator[tuple[Cell, KSelectConfig]]:
        """(cell, validated config) for each cell; cells of one overlay set share one compose."""
        by_ov: dict[tuple, list[Cell]] = {}
        for c in cells:
            by_ov.setdefault((c.rules, c.overlays), []).append(c)
        done: dict[Cell, KSelectConfig] = {}
        for ov, group in by_ov.items():
            for c, cfg in self._configs_one_set(group, ov):
                done[c] = cfg
        for c in cells:
            yield c, done[c]

    def _configs_one_set(self, cells: list[Cell], key: tuple) -> Iterator[tuple[Cell, KSelectConfig]]:
        rules, overlays = key
        if not cells:
            return
        declared = [g for g in GROUP_AXES if getattr(cells[0], g) is not None]
        raw = self.composed(overlays, declared, rules)
        sections: dict[tuple, BaseModel] = {}
        cross_ok: set[tuple] = set()
        base: KSelectConfig | None = None

        def build(cell: Cell, s: str) -> BaseModel:
            name = getattr(cell, s) if s in GROUP_AXES else None
            if name is not None:
                data = _deep_merge(self.group_file(s, name), raw.get(s) or {})
            else:
                data = raw.get(s)
                if data is None:
                    raise MatrixError(f"the composed config has no {s!r} section")
            for a, (sec, f) in FIELD_AXES.items():
                if sec == s and getattr(cell, a) is not None:
                    data = {**data, f: getattr(cell, a)}
            for k, v in cell.pin_sets:
                if k.split(".")[0] == s:
                    data = _set_path(data, k.split(".")[1:], v)
            if s == "platform" and data.get("name") == "auto":
                from .detect import detect_platform  # noqa: PLC0415 - torch only for auto

                data = detect_platform()
            try:
                return _SECTION_MODELS[s].model_validate(data)
            except ValidationError as e:
                raise MatrixError(_not_valid(cell, format_validation_error(e, root=s))) from None

        for cell in cells:
            # a section depends on its group file, its field axes and the pin (a cheap key per cell)
            keys = (
                ("platform", cell.platform, cell.pin),
                ("model", cell.model, cell.dtype, cell.multimodal, cell.pin),
                ("kv_cache", cell.kv_cache, cell.scales, cell.pin),
                ("spec_decode", cell.spec_decode, cell.pin),
                ("attention", cell.pin),
            )
            update = {}
            for s, key in zip(SECTIONS, keys):
                m = sections.get(key)
                if m is None:
                    m = sections[key] = build(cell, s)
                update[s] = m
            if base is None:
                data = {k: v for k, v in raw.items() if k not in SECTIONS}
                data.update({s: m.model_dump() for s, m in update.items()})
                try:
                    base = KSelectConfig.model_validate(data)
                except ValidationError as e:
                    raise MatrixError(_not_valid(cell, format_validation_error(e))) from None
            cfg = base.model_copy(update=update)
            if keys not in cross_ok:  # the schema's cross-section validators, once per combination
                try:
                    for check in _CROSS_CHECKS:
                        check(cfg)
                except ValueError as e:
                    raise MatrixError(_not_valid(cell, str(e))) from None
                cross_ok.add(keys)
            yield cell, cfg


def _not_valid(cell: Cell, msg: str) -> str:
    return (
        f"matrix cell {cell.id} is not a valid config: {msg.removeprefix('invalid config: ')}. "
        f"Declare such combinations under `skip:` in the matrix file (reproduce: {cell.command()})"
    )


# ---------------------------------------------------------------- resolution


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    selection: Selection | None
    error: str | None = None
    rejected: dict = field(default_factory=dict)  # SelectionError.rejected for invalid cells
    config: KSelectConfig | None = field(default=None, compare=False, repr=False)

    @property
    def outcome(self) -> str:
        return "ok" if self.selection is not None else "invalid"

    @property
    def warnings(self) -> list[tuple[str, str]]:
        """(group name, warning) of the whole selection, in order."""
        if self.selection is None:
            return []
        out = [(("draft:" if g.draft else "") + g.kind, w) for g in self.selection.groups for w in g.warnings]
        return out + [("model", w) for w in self.selection.warnings]


def resolve_cells(cells: Sequence[Cell], conf_dir: Path | str = CONF_DIR, builder: Builder | None = None) -> list[CellResult]:
    builder = builder or Builder(conf_dir)
    out = []
    # A matrix allocates ~100 objects per cell and frees almost none: the cyclic collector's full
    # passes would rescan them over and over (a third of the time on 5,000 cells). Pause it.
    paused = gc.isenabled()
    gc.disable()
    try:
        for cell, cfg in builder.configs(cells):
            try:
                out.append(CellResult(cell, resolve(cfg), config=cfg))
            except SelectionError as e:
                out.append(CellResult(cell, None, str(e).split("\n")[0], {k: tuple(v) for k, v in e.rejected.items()}, cfg))
    finally:
        if paused:
            gc.enable()
    return out


def resolve_matrix(
    spec: MatrixSpec | str, overlays: Iterable[str] = (), conf_dir: Path | str = CONF_DIR, builder: Builder | None = None,
    rules: str | None = None,
) -> list[CellResult]:
    """Every cell of the matrix under one overlay set, in matrix order."""
    if not isinstance(spec, MatrixSpec):
        spec = load_matrix(spec)
    return resolve_cells(expand(spec, overlays, rules), conf_dir, builder)


@functools.lru_cache(maxsize=16)
def resolve_named(name: str, overlays: tuple[str, ...] = (), rules: str | None = None) -> tuple[CellResult, ...]:
    """`resolve_matrix` of a named matrix of this checkout, cached per process (tests share it).
    The cached results live as long as the process, so they are moved out of the cyclic
    collector's sight (gc.freeze): later work does not pay for rescanning them."""
    out = tuple(resolve_matrix(load_matrix(name), overlays, builder=_shared_builder(), rules=rules))
    gc.freeze()
    return out


@functools.lru_cache(maxsize=1)
def _shared_builder() -> Builder:
    return Builder(CONF_DIR)


def parse_overlays(text: str | Sequence[str]) -> tuple[str, ...]:
    """`[]`, `[pr48666,pr52987]`, `pr48666,pr52987` or a list -> a tuple of overlay names."""
    if not isinstance(text, str):
        return tuple(text)
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    return tuple(x.strip().strip("'\"") for x in t.split(",") if x.strip())


def overlay_label(overlays: Sequence[str]) -> str:
    return "+".join(overlays) if overlays else "base"


__all__ = [
    "AXES", "Builder", "Cell", "CellResult", "MatrixError", "MatrixSpec", "expand", "load_matrix",
    "overlay_label", "parse_overlays", "resolve_cells", "resolve_matrix", "resolve_named", "skipped",
]  # fmt: skip


# ---------------------------------------------------------------- CLI plumbing shared by diff/plot/bench


def cli_args(argv: Sequence[str], defaults: dict[str, Any], prog: str) -> dict[str, Any]:
    """Hydra-style `key=value` arguments (no Hydra: these tools compose themselves)."""
    out = dict(defaults)
    for a in argv:
        key, eq, value = a.partition("=")
        key = key.lstrip("+")
        if not eq or key not in defaults:
            raise KSelectError(f"{prog}: bad argument {a!r}; expected key=value with key one of {sorted(defaults)}")
        d = defaults[key]
        if isinstance(d, bool):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise KSelectError(f"{prog}: {key}={value!r}; expected true or false")
            out[key] = value.lower() in ("true", "1", "yes")
        elif isinstance(d, int):
            try:
                out[key] = int(value)
            except ValueError:
                raise KSelectError(f"{prog}: {key}={value!r}; expected an integer") from None
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------- the resolved matrix as text (golden files, CLI)


def _group_line(g, claims: bool) -> str:
    name = f"draft:{g.kind}" if g.draft else g.kind
    backend = g.backend + (f" v{g.flash_attn_version}" if g.flash_attn_version else "")
    line = (
        f"  {name:<22}{backend:<17}kernel {g.kernel_block_size:<4} kv {g.kv_block_size:<4} {g.kv_cache_dtype:<9} "
        f"qq={'yes' if g.quant_query else 'no ':<4}{g.descale:<11}scales={g.kv_scales}"
    )
    if claims:
        counts: dict[str, int] = {}
        for c in g.claims:
            counts[c.status] = counts.get(c.status, 0) + 1
        line = f"{line:<120}claims: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "-")
    return line.rstrip()


def cell_text(r: CellResult, claims: bool = True) -> str:
    """One block per cell: a header line, one line per layer group, then the warnings. With
    claims=False (the golden files) hardware-claim status is left out: it changes when GPUs
    are measured, not when rules change."""
    if r.selection is None:
        return f"{r.cell.id}: INVALID {r.error}"
    lines = [f"{r.cell.id}: cache block {r.selection.block_size}"]
    lines += [_group_line(g, claims) for g in r.selection.groups]
    lines += [f"  ! {g}: {w}" for g, w in r.warnings if claims or not w.endswith("[conformance]")]
    return "\n".join(lines)


def matrix_text(results: Sequence[CellResult], title: str = "", claims: bool = True) -> str:
    head = [f"# {title}"] if title else []
    n_inv = sum(r.outcome == "invalid" for r in results)
    cols = "group, backend, kernel block, kv block, kv dtype, quant-query, descale, kv scales" + (", claim status" if claims else "")
    head.append(f"# {len(results)} cells, {n_inv} invalid; columns: {cols}; '!' lines are warnings")
    return "\n".join(head + [cell_text(r, claims) for r in results]) + "\n"


def _main(argv: list[str]) -> int:
    """kselect matrix [matrix=smoke] [overlays=[pr48666]] [rules=vllm_0_33_0] [format=text|ids|json]: the resolved matrix
    (rules: default, the rules option the matrix declares)."""
    if argv and argv[0] in ("-h", "--help"):
        print(_main.__doc__)
        return 0
    args = cli_args(argv, {"matrix": "smoke", "overlays": "[]", "format": "text", "rules": ""}, "kselect matrix")
    spec = load_matrix(args["matrix"])
    if args["rules"]:
        spec = spec.model_copy(update={"rules": args["rules"]})
    ov = parse_overlays(args["overlays"])
    if args["format"] == "ids":
        print("\n".join(c.id for c in expand(spec, ov)))
        return 0
    res = resolve_matrix(spec, ov)
    if args["format"] == "json":
        import json  # noqa: PLC0415

        from .render import as_dict  # noqa: PLC0415

        rows = [{"id": r.cell.id, "command": r.cell.command(), "outcome": r.outcome, "error": r.error,
                 "selection": as_dict(r.selection) if r.selection else None} for r in res]  # fmt: skip
        print(json.dumps(rows, indent=2))
    elif args["format"] == "text":
        print(matrix_text(res, f"matrix {spec.name}, rules {spec.rules or 'default'}, overlays {list(ov)}"), end="")
    else:
        raise KSelectError(f"matrix: format={args['format']!r}; allowed: text, ids, json")
    return 0


if __name__ == "__main__":
    from .cli import run_cli

    run_cli(_main)
