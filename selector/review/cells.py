"""A matrix declaration (conf/matrix/<name>.yaml) and its cells.

A matrix declares axes (platform × model × dtype × KV dtype × scales × spec-decode ×
multimodal), named `pins` (dotted overrides such as `attention.flash_attn_version: 3`) and
`skip` entries: combinations that are not valid configs (calibrated scales on a bf16 cache)
are skipped *by declaration*. `Cell.overrides()` is the Hydra command line of a cell.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config.compose import CONF_DIR
from ..base.errors import KSelectError, format_validation_error
from ..base.files import SAFE_NAME, load_yaml, safe_name
from ..config.vocab import SHORT_DTYPE

MATRIX_DIR = CONF_DIR / "matrix"

# Axes in cell order. Group axes pick a file of conf/<group>/; field axes set one key.
AXES = ("platform", "model", "dtype", "kv_cache", "scales", "spec_decode", "multimodal", "pin")
GROUP_AXES = ("platform", "model", "kv_cache", "spec_decode")
FIELD_AXES = {"dtype": ("model", "dtype"), "multimodal": ("model", "multimodal"), "scales": ("kv_cache", "scales")}
SECTIONS = ("platform", "model", "kv_cache", "spec_decode", "attention", "objective")


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
    review: bool = False  # the review check (`kselect diff review=true`) diffs this matrix (selector/review/touched.py)

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
            if name in GROUP_AXES and any(not SAFE_NAME.match(x) or ".." in x for x in values):
                raise ValueError(f"axis {name!r}: {values} must be names of files in conf/{name}/ (letters, digits, _ . -; no '..' or '/')")
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
        safe_name(str(name), "matrix")
        p = (Path(conf_dir) / "matrix" if conf_dir else MATRIX_DIR) / f"{name}.yaml"
    if not p.exists() and not p.is_symlink():
        opts = sorted(x.stem for x in p.parent.glob("*.yaml"))
        raise MatrixError(f"no matrix {str(name)!r} (looked for {p}); available: {', '.join(opts)}")
    data = load_yaml(p, "a matrix declaration (axes, pins, skip)")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise MatrixError(f"{p}: a {type(data).__name__}; expected a matrix declaration (a mapping with axes:, pins:, skip:)")
    data.setdefault("name", p.stem)
    try:
        return MatrixSpec.model_validate(data)
    except ValidationError as e:
        raise MatrixError(format_validation_error(e, root=f"matrix {p.stem}").replace("invalid config: ", f"invalid matrix ({p}): ")) from None


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
            parts.append(SHORT_DTYPE.get(self.dtype, self.dtype))
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
            o.append(f"model.multimodal={hydra_value(self.multimodal)}")
        if self.kv_cache:
            o.append(f"kv_cache={self.kv_cache}")
        if self.scales:
            o.append(f"kv_cache.scales={self.scales}")
        if self.spec_decode:
            o.append(f"spec_decode={self.spec_decode}")
        # a pin below a group key (attention.backend_per_kind.full_attention) may name a key the
        # group file lacks: Hydra's ++ sets it either way
        o += [f"{'++' if k.count('.') >= 2 else ''}{k}={hydra_value(v)}" for k, v in self.pin_sets]
        if self.rules:
            o.append(f"rules={self.rules}")
        if self.overlays:
            o.append(f"overlay=[{','.join(self.overlays)}]")
        return o

    def command(self) -> str:
        return "kselect select " + " ".join(self.overrides())


def hydra_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
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
