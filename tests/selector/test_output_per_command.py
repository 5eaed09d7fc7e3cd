"""`output=` is one key of the shared config, but not every command has every rendering: one it lacks is refused
(exit 2, one paragraph), not printed as another. Before, `kselect explain output=vllm` printed its table and
`kselect claims` and `kselect run` ignored `output` altogether."""

from __future__ import annotations

import json

import pytest
from kselect_inprocess import kselect_main

from kselect.selector.base.cli_errors import call_main

BASE = ["platform=sm90", "model=gemma4_e4b"]


def run(capsys, command: str, *argv: str) -> tuple[int, str, str]:
    base = ["platform=cpu", "model=gemma4_tiny"] if command == "run" else BASE
    code = call_main(kselect_main(command), [*base, *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


@pytest.mark.parametrize("command,output,allowed", [
    ("explain", "vllm", "allowed here: table, markdown, json"),
    ("claims", "vllm", "allowed: table (one claim id a line), json (a list)"),
    ("claims", "markdown", "allowed: table (one claim id a line), json (a list)"),
    ("run", "json", "allowed: table (kselect select output=json renders the selection alone)"),
    ("run", "vllm", "allowed: table (kselect select output=vllm renders the selection alone)"),
])  # fmt: skip
def test_a_rendering_the_command_lacks_is_refused(command, output, allowed, capsys):
    code, out, err = run(capsys, command, f"output={output}")
    assert code == 2 and f"output={output}" in err and allowed in err and not out, (code, err)


def test_claims_as_json_is_the_same_list_as_the_lines(capsys):
    code, lines, _ = run(capsys, "claims")
    assert code == 0
    code, text, _ = run(capsys, "claims", "output=json")
    assert code == 0 and json.loads(text) == lines.split() and len(lines.split()) > 10
