"""The environment matrix resolved: every cell of a declared sweep (`cells.py`) as a config
(`configs.py`, Hydra once per overlay set) and its selection, plus the matrix as text.

    spec = load_matrix("default")
    results = resolve_matrix(spec, overlays=["pr48666"])    # list[CellResult], matrix order

A cell that is not a valid config and is not skipped is an error in the matrix file, never
silently dropped. A cell whose resolution raises `SelectionError` (no valid backend, an
invalid pin) is a result with outcome "invalid".
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.compose import CONF_DIR
from ..config.overlay_order import check_overlay_list, check_overlays
from ..base.files import group_options
from ..config.releases import default_rules
from ..review.cells import AXES, Cell, MatrixError, MatrixSpec, expand, load_matrix, skipped
from ..review import parallel
from ..review.configs import Builder
from ..base.errors import KSelectError, SelectionError
from ..outputs.records import ClaimsWarning, Failure, Warning
from ..evidence.evidence import Evidence
from ..measure.select import select
from ..config.schema import KSelectConfig
from ..outputs.selection import Selection

# ---------------------------------------------------------------- resolution


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    selection: Selection | None
    failure: Failure | None = None  # SelectionError.failure for invalid cells
    rejected: dict = field(default_factory=dict)  # SelectionError.rejected for invalid cells
    config: KSelectConfig | None = field(default=None, compare=False, repr=False)

    @property
    def outcome(self) -> str:
        return "ok" if self.selection is not None else "invalid"

    @property
    def error(self) -> str | None:
        """The failure as text (the first line of the SelectionError)."""
        return self.failure.text if self.failure is not None else None

    @property
    def warnings(self) -> list[Warning]:
        """Every warning of the selection, in order (each names its group)."""
        return self.selection.all_warnings() if self.selection is not None else []


def resolve_cells(cells: Sequence[Cell], conf_dir: Path | str = CONF_DIR, builder: Builder | None = None,
                  desc: str | None = None, evidence: Evidence | None = None) -> list[CellResult]:
    """desc: a progress line on a terminal (selector/review/progress.py). evidence: what the cells' conf tree
    measured (None: loaded once here from the builder's conf directory, the tree the cells are composed from)."""
    builder = builder or Builder(conf_dir)
    evidence = evidence if evidence is not None else Evidence.load(builder.conf_dir)
    with parallel.paused_gc():
        return _resolved(builder.configs(cells), len(cells), evidence, desc)


def _resolved(configs: Iterable[tuple[Cell, KSelectConfig]], total: int, evidence: Evidence, desc: str | None) -> list[CellResult]:
    from ..review.progress import progress  # noqa: PLC0415

    if total >= parallel.MIN_CELLS:  # cells that search by measurement: on every core (review/parallel.py)
        configs = list(configs)
        if parallel.worth_it([cfg for _, cfg in configs]):
            got = parallel.outcomes([cfg for _, cfg in configs], evidence)
            return [CellResult(cell, sel, failure, rejected, cfg) for (cell, cfg), (sel, failure, rejected) in zip(configs, got)]
    out = []
    for cell, cfg in progress(configs, desc, total=total) if desc else configs:
        try:
            out.append(CellResult(cell, select(cfg, evidence), config=cfg))
        except SelectionError as e:
            out.append(CellResult(cell, None, e.failure, dict(e.rejected), cfg))
    return out


def resolve_matrix(
    spec: MatrixSpec | str, overlays: Iterable[str] = (), conf_dir: Path | str = CONF_DIR, builder: Builder | None = None,
    rules: str | None = None,
) -> list[CellResult]:
    """Every cell of the matrix under one overlay set, in matrix order, under `rules` (default: the
    rules option the matrix declares)."""
    if not isinstance(spec, MatrixSpec):
        spec = load_matrix(spec)
    return resolve_cells(expand(spec, overlays, rules), conf_dir, builder)


@functools.lru_cache(maxsize=16)
def resolve_named(name: str, overlays: tuple[str, ...] = (), rules: str | None = None) -> tuple[CellResult, ...]:
    """`resolve_matrix` of a named matrix of this checkout, cached per process (tests share it)."""
    return tuple(resolve_matrix(load_matrix(name), overlays, builder=_shared_builder(), rules=rules))


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
    name = g.id
    backend = g.label
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
    lines += [f"  ! {w.group}: {w.text}" for w in r.warnings if claims or not isinstance(w, ClaimsWarning)]
    return "\n".join(lines)


def matrix_text(results: Sequence[CellResult], title: str = "", claims: bool = True) -> str:
    head = [f"# {title}"] if title else []
    n_inv = sum(r.outcome == "invalid" for r in results)
    cols = "group, backend, kernel block, kv block, kv dtype, quant-query, descale, kv scales" + (", claim status" if claims else "")
    head.append(f"# {len(results)} cells, {n_inv} invalid; columns: {cols}; '!' lines are warnings")
    return "\n".join(head + [cell_text(r, claims) for r in results]) + "\n"


@dataclass
class MatrixArgs:
    matrix: str = "smoke"
    overlay: list[str] = field(default_factory=list)
    format: str = "text"  # text | ids | json
    rules: str = ""  # a rules option for every cell (default: the one the matrix declares)


RENAMED = {"overlays": "write overlay=[pr48666,...] (as kselect select does)"}


def matrix_task(cfg) -> int:
    """kselect matrix [matrix=smoke] [overlay=[pr48666]] [rules=vllm_0_33_0] [format=text|ids|json]: the resolved
    matrix (rules: default, the rules option the matrix declares), one block per cell (a Hydra app, structured config `kselect_matrix`)."""
    if cfg.format not in ("text", "ids", "json"):
        raise KSelectError(f"matrix: format={cfg.format!r}; allowed: text, ids, json")
    spec = load_matrix(cfg.matrix)
    if cfg.rules:  # every cell under this rules option (default: the one the matrix declares)
        spec = spec.model_copy(update={"rules": cfg.rules})
    ov = check_overlays("matrix: overlay", cfg.overlay, CONF_DIR)
    check_overlay_list(list(ov), CONF_DIR, f"[{','.join(ov)}]")  # ids too: a list select would refuse lists nothing
    if spec.rules and spec.rules not in (have := group_options(CONF_DIR, "rules")):
        raise KSelectError(f"matrix: rules={spec.rules}: no such rules option; allowed: {', '.join(have)}")
    if cfg.format == "ids":
        print("\n".join(c.id for c in expand(spec, ov)))
        return 0
    res = resolve_cells(expand(spec, ov), desc=f"matrix {spec.name}")
    if cfg.format == "json":
        import json  # noqa: PLC0415

        from ..export.render import as_dict  # noqa: PLC0415

        rows = [{"id": r.cell.id, "command": r.cell.command(), "outcome": r.outcome, "error": r.error,
                 "selection": as_dict(r.selection) if r.selection else None} for r in res]  # fmt: skip
        print(json.dumps(rows, indent=2))
    else:
        rules = spec.rules or f"{default_rules(CONF_DIR)} (the default release)"
        print(matrix_text(res, f"matrix {spec.name}, rules {rules}, overlays {list(ov)}"), end="")
    return 0
