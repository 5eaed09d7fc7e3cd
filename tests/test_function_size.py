"""Every function in the selector is short and narrow: at most 60 lines and 6 parameters (self/cls not
counted; *args and **kwargs count one each), checked on the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES, MAX_PARAMS = 60, 6


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return names + [x.arg for x in (a.vararg, a.kwarg) if x is not None]


def oversized(source: str, where: str) -> list[str]:
    """The functions of a module over the limits, each as `where:line name (why)`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines, params = node.end_lineno - node.lineno + 1, len(_parameters(node))
            if lines > MAX_LINES or params > MAX_PARAMS:
                out.append(f"{where}:{node.lineno} {node.name} ({lines} lines, {params} parameters)")
    return out


def test_selector_functions_are_small():
    found = [f for path in sorted((ROOT / "selector").rglob("*.py"))
             for f in oversized(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, f"over {MAX_LINES} lines or {MAX_PARAMS} parameters:\n" + "\n".join(found)


def test_the_check_counts_lines_and_parameters():
    long_body = "def long():\n" + "    x = 1\n" * MAX_LINES
    wide = "def wide(self, a, b, c, d, e, f, *rest):\n    pass\n"
    fits = "def fits(self, a, b, c, d, e, f):\n    pass\n"
    assert oversized(long_body, "m") == [f"m:1 long ({MAX_LINES + 1} lines, 0 parameters)"]
    assert oversized(wide, "m") == ["m:1 wide (2 lines, 7 parameters)"]
    assert oversized(fits, "m") == []
