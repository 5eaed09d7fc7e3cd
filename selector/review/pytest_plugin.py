"""pytest plugin: run any test over the cells of a kselect matrix.

    @pytest.mark.kselect_matrix("smoke", rules="post_pr52987", overlays=[[], ["pr48666"]], where={"platform": "sm90"})
    def test_fp8_paths(kselect_cell):
        cell, cfg, selection = kselect_cell          # Cell, KSelectConfig, Selection
        ...

Each cell becomes one test with a readable id, e.g.
`test_fp8_paths[sm90-gemma4_31b-fp8-mtp-pr48666]`, so `-k sm90-gemma4_31b` or `-k "mtp and
not pr48666"` select cells. Marker arguments (all optional):

- name (first positional): a file of conf/matrix/ (default `smoke`);
- overlays: a list of overlay sets (default `[[]]`, no overlay);
- rules: a rules option for every cell (default: the one the matrix declares, else conf/config.yaml's
  default release, the one `kselect select` runs); the seed story's overlays need `rules="post_pr52987"`;
- where: {axis: value or [values]} keeps only matching cells (axes: platform, model, dtype,
  kv_cache, scales, spec_decode, multimodal, pin);
- invalid: "skip" (default: a cell whose resolution raises SelectionError is skipped with the
  message) or "include" (the test gets it; `kselect_cell.selection` is None and
  `kselect_cell.error` holds the message).

Command line: `--kselect-matrix=NAME` runs every marked test over another matrix (e.g.
`--kselect-matrix=default` for the big sweep). A test that asks for `kselect_cell` without the
marker runs over `smoke` under the default release.

Registered by tests/conftest.py (`pytest_plugins`) and, for an installed kselect, by the
`pytest11` entry point `selector.pytest_plugin`; `-p selector.pytest_plugin` works anywhere.
Resolution is lazy and cached per session: one Hydra compose per overlay set, then each
matrix is resolved once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ..review.matrix import AXES, Cell, CellResult, MatrixError, expand, load_matrix, resolve_named
from ..config.schema import KSelectConfig
from ..outputs.selection import Selection

MARKER = "kselect_matrix"
DEFAULT_MATRIX = "smoke"


@dataclass(frozen=True)
class CellCase:
    """What `kselect_cell` gives: unpacks as (cell, cfg, selection)."""

    cell: Cell
    cfg: KSelectConfig
    selection: Selection | None
    error: str | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.cell, self.cfg, self.selection))

    @property
    def id(self) -> str:
        return self.cell.id


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kselect")
    group.addoption(
        "--kselect-matrix",
        default=None,
        metavar="NAME",
        help="run tests marked kselect_matrix over this matrix of conf/matrix/ instead of the marker's (e.g. smoke, default)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name='{DEFAULT_MATRIX}', overlays=[[]], rules=None, where={{}}, invalid='skip'): "
        "parametrize the kselect_cell fixture over the cells of a kselect matrix (see selector/review/pytest_plugin.py)",
    )


def _marker_args(metafunc: pytest.Metafunc) -> dict[str, Any]:
    m = metafunc.definition.get_closest_marker(MARKER)
    args = {"name": DEFAULT_MATRIX, "overlays": [[]], "rules": None, "where": {}, "invalid": "skip"}
    if m is not None:
        if m.args:
            args["name"] = m.args[0]
        unknown = set(m.kwargs) - set(args)
        if unknown:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: {MARKER} takes no {sorted(unknown)}; allowed: {sorted(args)}")
        args.update(m.kwargs)
    if args["invalid"] not in ("skip", "include"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {MARKER}(invalid=...) must be 'skip' or 'include'")
    opt = metafunc.config.getoption("kselect_matrix")
    if opt:
        args["name"] = opt
    return args


def _matches(cell: Cell, where: dict[str, Any]) -> bool:
    return all(cell.axis(a) in (v if isinstance(v, (list, tuple, set)) else [v]) for a, v in where.items())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kselect_cell" not in metafunc.fixturenames:
        return
    args = _marker_args(metafunc)
    bad = set(args["where"]) - set(AXES)
    if bad:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {MARKER}(where=...) names unknown axes {sorted(bad)}; allowed: {list(AXES)}")
    try:
        spec = load_matrix(args["name"])
    except MatrixError as e:
        raise pytest.UsageError(str(e)) from None
    overlays = [tuple(o) for o in args["overlays"]]
    cells = [c.with_overlays(ov) for c in expand(spec, (), args["rules"]) if _matches(c, args["where"]) for ov in overlays]
    params = [pytest.param((str(args["name"]), c, args["invalid"], args["rules"]), id=c.id) for c in cells]
    if not params:
        params = [pytest.param(None, id="no-cells", marks=pytest.mark.skip(reason=f"no cell of {spec.name} matches {args['where']}"))]
    metafunc.parametrize("kselect_cell", params, indirect=True)


@pytest.fixture
def kselect_cell(request: pytest.FixtureRequest) -> CellCase:
    """(cell, cfg, selection) of one matrix cell; see the module docstring."""
    param = getattr(request, "param", None)
    if param is None:
        pytest.skip("kselect_cell is parametrized by the kselect_matrix marker")
    name, cell, invalid, rules = param
    res = _by_cell(name, cell.overlays, rules)[cell]
    case = CellCase(cell, res.config, res.selection, res.error)
    if res.selection is None and invalid == "skip":
        pytest.skip(f"invalid cell {cell.id}: {res.error}")
    return case


@functools.lru_cache(maxsize=16)
def _by_cell(name: str, overlays: tuple[str, ...], rules: str | None) -> dict[Cell, CellResult]:
    return {r.cell: r for r in resolve_named(name, overlays, rules)}
