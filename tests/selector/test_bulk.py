"""`kselect select cells=<file.jsonl>` and `api.select_many`: many selections in one process, each answer what
`kselect select <overrides> output=json` prints for the same overrides, byte for byte (selector/review/bulk.py).

The Gemma-4 grid and the models grid (kselect/oracle/cells.py, 6,320 cells) are answered in bulk and each
block of cells (platform x model) is kept as the SHA-256 of its answers under
tests/selector/__snapshots__/test_bulk/: a change of any answer fails with the block that changed. After
reviewing it (`kselect diff ...`), update with `pytest tests/selector/test_bulk.py --snapshot-update`."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from kselect_inprocess import kselect_main
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from kselect.oracle.cells import grid, models_grid
from kselect.selector.api import select_many
from kselect.selector.base.cli_errors import call_main
from kselect.commands.select import main as select_main
from kselect.selector.review.bulk import as_cell

REQUESTS = [
    {"platform": "sm90", "model": "llama3_1_8b"},
    {"platform": "sm90", "model": "gemma4_31b", "kv_cache": "fp8", "rules": "post_pr52987", "overlay": ["pr48666"]},
    ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "objective=latency"],
    {"platform": "sm80", "model": "llama3_1_8b", "attention.backend": "FLASHMLA"},  # no valid backend: exit 2
    {"platform": "sm90", "model": "no_such_model"},  # not a config: exit 2
    {"platform": "sm90", "model": "gemma4_31b", "overlay": ["pr48666"]},  # an overlay of another release: exit 2
    {"platform": "sm100", "model": "gpt_oss_20b", "output": "vllm"},
    {"platform": "sm90", "model": "deepseek_v3", "kv_cache": "fp8", "model.multimodal": False, "spec_decode": "none"},
    ["platform=sm90", "model=qwen3_8b", "overlay=[]", "strict=true"],  # data of other kernel versions: exit 2
]


class TextSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "txt"


def _single(overrides: list[str], capsys) -> tuple[int, str, str]:
    """What `kselect select <overrides>` prints, in this process (compose, select, render)."""
    code = call_main(select_main, overrides)
    out = capsys.readouterr()
    return code, out.out, out.err


def _check_same_as_single(record: dict, capsys) -> None:
    explicit = any(o.partition("=")[0] == "output" for o in record["overrides"])
    code, out, err = _single(record["overrides"] + ([] if explicit else ["output=json"]), capsys)
    assert record["exit"] == code, record
    if code:
        assert err == f"kselect: {record['error']}\n"
    elif "selection" in record:
        assert out == json.dumps(record["selection"], indent=2) + "\n"
    else:
        assert out == record["text"] + "\n"


def test_cells_file_answers_each_line_as_select_does(tmp_path, capsys):
    path = tmp_path / "cells.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in REQUESTS) + "\n\nnot json\n")
    assert call_main(kselect_main("select"), [f"cells={path}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == len(REQUESTS) + 1
    assert [r["exit"] for r in records] == [0, 0, 0, 2, 2, 2, 0, 0, 2, 2]
    assert "not JSON" in records[-1]["error"] and f"{path}:11" in records[-1]["error"]
    assert records[2]["selection"]["groups"][0]["measured"]  # objective=latency chose by measurement
    assert "vllm serve" in records[6]["text"]
    for r in records[:-1]:
        _check_same_as_single(r, capsys)


def test_cells_from_stdin_with_common_overrides(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO('{"model": "llama3_1_8b"}\n{"model": "qwen3_8b"}\n'))
    assert call_main(kselect_main("select"), ["cells=-", "platform=sm90"]) == 0
    records = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["overrides"] for r in records] == [["platform=sm90", "model=llama3_1_8b"], ["platform=sm90", "model=qwen3_8b"]]
    assert all(r["exit"] == 0 and r["selection"]["groups"] for r in records)


def test_cells_refuses_a_missing_file_and_flags(tmp_path, capsys):
    assert call_main(kselect_main("select"), [f"cells={tmp_path / 'none.jsonl'}"]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert call_main(kselect_main("select"), ["cells=-", "--cfg", "job"]) == 2
    assert "no flags" in capsys.readouterr().err


def _grid_requests() -> list[tuple[str, list[str]]]:
    """(block, overrides): the Gemma-4 grid under the default rules, the models grid under vllm_0_34_0."""
    out = [(f"gemma4 {c.platform} {c.model}", c.kselect_overrides()) for c in grid()]
    return out + [(f"models {c.platform} {c.model}", c.kselect_overrides("vllm_0_34_0")) for c in models_grid()]


def test_the_grids_answer_as_before(snapshot):
    """Every answer of both grids, as the SHA-256 of each block's JSON lines (matrix-shaped, so in bulk)."""
    reqs = _grid_requests()
    assert all(as_cell(o) is not None for _, o in reqs)
    blocks: dict[str, hashlib._Hash] = {}
    for (block, _), a in zip(reqs, select_many([o for _, o in reqs])):
        line = json.dumps(a.record("json"), separators=(",", ":")) + "\n"
        blocks.setdefault(block, hashlib.sha256()).update(line.encode())
    text = "".join(f"{h.hexdigest()}  {b}\n" for b, h in blocks.items())
    assert text == snapshot.use_extension(TextSnapshot)


@pytest.mark.parametrize("seed", [50])
def test_bulk_equals_the_single_command_on_grid_cells(seed, capsys):
    """A sample of grid cells, each also through `kselect select`'s own compose (cached) and render."""
    reqs = [o for _, o in _grid_requests()]
    sample = random.Random(seed).sample(reqs, 12)
    for a in select_many(sample):
        _check_same_as_single(a.record("json"), capsys)


def test_configs_of_gives_each_request_the_config_its_own_compose_gives():
    """configs_of (the batch `kselect claims` composes through): a request the Builder stands in for, an explicit
    `overlay=[]` included, gets the config a compose of exactly its overrides gives; any other, and every request
    of a batch the Builder refuses, gets None (composed on its own by the caller)."""
    from kselect.selector.api import compose
    from kselect.selector.review.bulk import configs_of

    batched = [["platform=sm90", f"model={m}", f"kv_cache={kv}", "model.multimodal=true", f"rules={r}", f"overlay={ov}"]
               for m, kv in (("gemma4_31b", "fp8"), ("gemma4_e4b", "auto"))
               for r, ov in (("post_pr52987", "[]"), ("post_pr52987", "[pr48666]"), ("vllm_0_33_0", "[]"))]
    alone = [["platform=auto", "model=gemma4_31b"], ["platform=sm90", "platform.packages.fa4=false", "model=gemma4_31b"]]
    refused = [["platform=sm90", "model=gemma4_31b", "overlay=[]"], ["platform=sm90", "model=no_such_model", "overlay=[]"]]
    got = configs_of([*batched, *alone, *refused])
    assert [c is None for c in got] == [False] * len(batched) + [True] * (len(alone) + len(refused))
    for r, cfg in zip(batched, got):
        assert cfg.model_dump() == compose(r).model_dump(), r
