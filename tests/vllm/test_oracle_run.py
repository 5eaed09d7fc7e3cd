"""`kselect oracle`'s runner without vLLM: batches, warm workers, resume, byte-identical records.

The workers are tests/vllm/fake_worker.py, which runs kselect/oracle/worker.py's own protocol
loop with a fake chain, in real subprocesses spoken to as the release's python is."""

import gzip
import json
import sys
import threading
from pathlib import Path

import pytest

from kselect.oracle.cells import grid
from kselect.oracle.run import Batch, WorkerError, make_batches, read_lines, run_batches, run_grid

FAKE = [sys.executable, str(Path(__file__).parent / "fake_worker.py"), "--src", "unused", "--version", "9.9.9"]
# 2 capabilities x 2 models x 2 KV dtypes x 2 backend pins x 2 spec = 32 cells, in grid order
CELLS = grid(ccs=["9.0", "12.0"], models=["gemma4_e2b", "gemma4_31b"], kv_dtypes=["auto", "fp8"],
             multimodal=[False], fa_pins=[None], backends=["auto", "TRITON_ATTN"])


def _fake_dirs(root, models):
    out = {}
    for m in models:
        (root / m).mkdir(parents=True, exist_ok=True)
        (root / m / "config.json").write_text("{}")
        out[m] = (str(root / m), None)
    return out


def _run(out, monkeypatch, *, jobs=2, batch_size=5, **env):
    for k in ("FAKE_ORACLE_CRASH", "FAKE_ORACLE_JITTER", "FAKE_ORACLE_RAN"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    return run_grid(CELLS, out, FAKE, jobs=jobs, batch_size=batch_size, quiet=True, model_dirs=_fake_dirs)


def test_batches_are_one_capability_each_in_grid_order():
    batches = make_batches(CELLS, 5)
    assert all(len({c.cc for c in b.cells}) == 1 and 1 <= len(b.cells) <= 5 for b in batches)
    assert [c for b in batches for c in b.cells] == CELLS  # grid order: per capability, then as listed
    assert len({b.id for b in batches}) == len(batches)
    assert [b.id for b in make_batches(CELLS, 5)] == [b.id for b in batches]  # ids follow the cells
    assert len(make_batches(CELLS, 100)) == 2


def test_record_is_byte_identical_however_the_grid_was_run(tmp_path, monkeypatch):
    one = tmp_path / "one.jsonl.gz"
    many = tmp_path / "many.jsonl.gz"
    _run(one, monkeypatch, jobs=1, batch_size=32)
    _run(many, monkeypatch, jobs=3, batch_size=3, FAKE_ORACLE_JITTER=1)
    assert one.read_bytes() == many.read_bytes()
    lines = gzip.decompress(one.read_bytes()).decode().splitlines()
    assert [json.loads(x)["key"] for x in lines] == [c.key for c in CELLS]
    assert all(json.loads(x)["vllm_version"] == "9.9.9" for x in lines)
    assert not (tmp_path / "one.jsonl.gz.parts").exists()
    plain = tmp_path / "plain.jsonl"
    _run(plain, monkeypatch, jobs=2, batch_size=7)
    assert plain.read_bytes() == gzip.decompress(one.read_bytes())


def test_a_stopped_run_resumes_with_the_cells_left(tmp_path, monkeypatch):
    out = tmp_path / "rec.jsonl.gz"
    ran = tmp_path / "ran.txt"
    with pytest.raises(WorkerError, match="exited"):  # the worker dies before its 11th cell: 2 batches of 5 kept
        _run(out, monkeypatch, jobs=1, batch_size=5, FAKE_ORACLE_CRASH=11, FAKE_ORACLE_RAN=ran)
    assert not out.exists()
    parts = sorted((tmp_path / "rec.jsonl.gz.parts").glob("batch-*.jsonl"))
    assert len(parts) == 2
    first = ran.read_text().split()
    assert len(first) == 10
    ran.unlink()
    res = _run(out, monkeypatch, jobs=2, batch_size=4, FAKE_ORACLE_RAN=ran)
    second = ran.read_text().split()
    assert res.ran == len(second) == len(CELLS) - 10 and not set(first) & set(second)
    clean = tmp_path / "clean.jsonl.gz"
    _run(clean, monkeypatch, jobs=1, batch_size=32)
    assert out.read_bytes() == clean.read_bytes()
    ran.unlink()
    before = out.stat().st_mtime_ns
    assert _run(out, monkeypatch).ran == 0 and not ran.exists()  # a finished record: nothing re-runs
    assert out.stat().st_mtime_ns == before  # nor is it rewritten


def test_a_dead_worker_is_reported_with_its_log(tmp_path, monkeypatch):
    with pytest.raises(WorkerError) as e:
        _run(tmp_path / "r.jsonl", monkeypatch, jobs=1, FAKE_ORACLE_CRASH=1)
    assert "exited (3)" in str(e.value) and "log" in str(e.value)


def test_workers_stay_warm_and_restart_only_to_change_capability():
    batches = make_batches(grid(ccs=["8.0", "9.0", "10.0"], models=["gemma4_e2b"], kv_dtypes=["auto"],
                                multimodal=[False], fa_pins=[None]), 2)
    starts, ran, lock = [], [], threading.Lock()

    class W:
        def __init__(self, cc):
            self.cc = cc
            with lock:
                starts.append(cc)

        def run(self, payload):
            with lock:
                ran.append(payload["id"])
            return {"id": payload["id"]}

        def close(self):
            pass

    def check(b: Batch, ans):
        assert ans["id"] == b.id

    run_batches(batches, W, 2, lambda b: {"id": b.id, "cc": b.cc}, check)
    assert sorted(ran) == sorted(b.id for b in batches)  # each batch once
    assert len(batches) == 12 and len(starts) <= 2 + 3  # a start per capability and worker at most, not per batch
    assert sorted(set(starts)) == ["10.0", "8.0", "9.0"]


def test_read_lines_ignores_an_unterminated_last_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"key": "a", "v": 1}\n{"key": "b", "v"')
    assert read_lines(p) == {"a": {"key": "a", "v": 1}}


@pytest.mark.slow
def test_ray_actors_write_the_same_record(tmp_path, monkeypatch):
    """The optional Ray path (kselect[ray]): two actors on a local Ray instance, each owning a
    worker process, produce the local run's bytes."""
    ray = pytest.importorskip("ray")
    local = tmp_path / "local.jsonl.gz"
    _run(local, monkeypatch, jobs=1, batch_size=32)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for k in ("FAKE_ORACLE_CRASH", "FAKE_ORACLE_RAN"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("FAKE_ORACLE_JITTER", "1")
        out = tmp_path / "ray.jsonl.gz"
        run_grid(CELLS, out, FAKE, jobs=2, batch_size=4, ray_address="auto", quiet=True, model_dirs=_fake_dirs)
    finally:
        ray.shutdown()
    assert out.read_bytes() == local.read_bytes()


@pytest.mark.slow
def test_ray_address_local_starts_ray_and_writes_the_same_record(tmp_path, monkeypatch):
    """`--ray-address local`: the run starts a Ray instance on this machine, runs the batches as actors,
    writes the local run's bytes and stops the instance it started."""
    ray = pytest.importorskip("ray")
    local = tmp_path / "local.jsonl"
    _run(local, monkeypatch, jobs=1, batch_size=32)
    out = tmp_path / "ray.jsonl"
    monkeypatch.setenv("FAKE_ORACLE_JITTER", "1")
    run_grid(CELLS, out, FAKE, jobs=2, batch_size=6, ray_address="local", quiet=True, model_dirs=_fake_dirs)
    assert out.read_bytes() == local.read_bytes()
    assert not ray.is_initialized()


def test_ray_is_imported_only_when_asked():
    """Ray is an optional extra: the oracle's command, runner and export never import it on their own."""
    import subprocess

    code = ("import sys; import kselect.commands.oracle as c, kselect.oracle.run, kselect.oracle.export; "
            "c.parser().parse_args(['0.34.0', '--ray-address', 'local']); "
            "assert 'ray' not in sys.modules, 'ray imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
