"""kselect/measurement/prefill_clocks.py's pure parts: nvidia-smi samples parsed and attributed to timed steps, the slow-step
summary, and the phase timer's wrapping undone."""

import sys
from datetime import datetime
from types import SimpleNamespace

import pytest

from kselect.measurement import prefill_clocks as pc


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_parse_smi_reads_samples_and_skips_what_does_not_parse():
    t = 1_764_000_000.25
    text = "\n".join([
        "timestamp, clocks.current.sm [MHz], ...",  # a header
        f"{stamp(t)}, 1980, 3201, 512.33, 41, 0x0000000000000000",
        f"{stamp(t + 0.02)}, 1755, 3201, 699.10, 44, 0x0000000000000004",
        f"{stamp(t + 0.04)}, [N/A], 3201, 699.10, 44, 0x0",
    ])
    got = pc.parse_smi(text)
    assert [g["sm"] for g in got] == [1980.0, 1755.0]
    assert got[0]["t"] == pytest.approx(t, abs=1e-3)
    assert got[1]["reasons"] == 0x4 and pc.reason_names(got[1]["reasons"]) == ["sw power cap"]
    assert pc.reason_names(0x4 | 0x400) == ["sw power cap", "0x400"]


def test_attribute_takes_samples_inside_a_step_or_the_nearest():
    samples = [dict(t=t, sm=sm, mem=3201.0, power=p, temp=40.0, reasons=r)
               for t, sm, p, r in [(0.0, 1980, 300, 0), (1.0, 1700, 700, 4), (1.5, 1800, 650, 0), (9.0, 1980, 200, 1)]]
    steps = [dict(t0=0.9, t1=1.6, ms=70.0), dict(t0=8.0, t1=8.1, ms=64.0)]
    pc.attribute(steps, samples)
    assert steps[0]["sm_mean"] == 1750 and steps[0]["sm_min"] == 1700 and steps[0]["power_max"] == 700
    assert steps[0]["reasons"] == ["sw power cap"] and steps[0]["samples"] == 2
    assert steps[1]["sm_mean"] == 1980 and steps[1]["reasons"] == ["idle"]  # the nearest sample (t=9.0, not 1.5)


def test_summarize_splits_slow_steps_and_correlates_with_the_clock():
    steps = [dict(ms=ms, sm_mean=sm, power_max=600.0, reasons=[] if ms < 68 else ["sw power cap"])
             for ms, sm in [(64, 1980), (65, 1970), (64.5, 1975), (72, 1700), (75, 1650)]]
    s = pc.summarize(steps)
    assert s["median_ms"] == 65 and s["slow"] == 2
    assert s["slow_sm_mhz"] == 1675 and s["rest_sm_mhz"] == pytest.approx(1975)
    assert s["reasons_slow"] == ["sw power cap"] and s["reasons_rest"] == []
    assert s["rank_corr_ms_vs_sm"] == pytest.approx(-1.0)
    assert pc.rank_corr([1, 2], [2, 1]) is None


def test_timed_wraps_time_each_call_between_syncs_and_restore_what_they_wrapped():
    class Thing:
        def work(self, x):
            return x + 1

    thing, syncs, got = Thing(), [], []
    t = pc.Timed()
    t.wrap(thing, "work", got.append, lambda: syncs.append(1))  # an instance's bound method
    t.wrap(Thing, "work", got.append)  # the class's own function, no syncs
    assert thing.work(1) == 2 and len(got) == 1 and got[0] >= 0 and len(syncs) == 2  # the instance's wrap wins
    assert Thing().work(1) == 2 and len(got) == 2 and len(syncs) == 2
    t.restore()
    assert "work" not in vars(thing) and Thing.__dict__["work"].__name__ == "work"
    assert thing.work(1) == 2 and len(got) == 2 and len(syncs) == 2


def test_host_clock_times_the_fill_and_its_parts_and_unwraps_them():
    from kselect.gemma4.block_manager import GroupBlocks
    from kselect.gemma4.model_runner import ModelRunner
    from kselect.gemma4.graphs import PrefillGraph

    before = (PrefillGraph.fill, GroupBlocks.block_table, GroupBlocks.slot_mapping, ModelRunner.prepare_replay)
    g = GroupBlocks("full_attention", 4, 16)
    g.ensure(0, 10)
    with pc.HostClock() as hc:
        assert g.block_table([0], 4).tolist() == [g.tables[0] + [0]]
        assert g.slot_mapping([0], [0], [3]).tolist() == [g.tables[0][0] * 4 + i for i in range(3)]
        assert hc.parts["block_table"] > 0 and hc.parts["slot_mapping"] > 0 and hc.parts["prepare_replay"] == 0
        hc.reset()
        assert hc.parts["block_table"] == 0 and hc.fill_ms == 0
    assert (PrefillGraph.fill, GroupBlocks.block_table, GroupBlocks.slot_mapping, ModelRunner.prepare_replay) == before


def test_threads_now_names_the_python_threads_and_counts_the_os_ones():
    import threading

    ev = threading.Event()
    t = threading.Thread(target=ev.wait, name="kselect-test-waiter")
    t.start()
    try:
        got = pc.threads_now()
        assert "MainThread" in got["python"] and "kselect-test-waiter" in got["python"]
        assert got["os"] is None or got["os"] >= 2
        assert got["switch_interval_s"] > 0
    finally:
        ev.set()
        t.join()


def test_timed_usage_tells_a_wait_from_work(monkeypatch):
    """Timed adds each call's host ms and its thread-usage difference; a fake clock and fake usage make
    it exact (a real sleep or spin on shared cores is a benchmark, not a test)."""
    clock = {"s": 100.0}
    use = dict.fromkeys(pc.USAGE, 0.0)
    monkeypatch.setattr(pc, "time", SimpleNamespace(perf_counter=lambda: clock["s"]))  # this module's clock only
    monkeypatch.setattr(pc, "thread_usage", lambda: dict(use))
    got, usage = [], []

    class Thing:
        def wait(self):  # 30 ms of wall time, no CPU, one voluntary switch
            clock["s"] += 0.030
            use["vcsw"] += 1

        def work(self):  # 20 ms of wall time, all of it CPU
            clock["s"] += 0.020
            use["cpu_ms"] += 20.0

    t = pc.Timed()
    t.wrap(Thing, "wait", got.append, usage=usage.append)
    t.wrap(Thing, "work", got.append, usage=usage.append)
    try:
        Thing().wait()
        Thing().work()
    finally:
        t.restore()
    (wait, work), (wait_ms, work_ms) = usage, got
    assert set(wait) == set(pc.USAGE)
    assert wait_ms == pytest.approx(30.0) and work_ms == pytest.approx(20.0)
    assert wait["cpu_ms"] == 0 and wait["vcsw"] == 1  # waited: no CPU, the thread gave way
    assert work["cpu_ms"] == 20.0 and work["vcsw"] == 0  # worked: the wall time was CPU time
    Thing().wait()  # restored: no longer timed
    assert len(got) == 2


def test_rounds_restore_threads_and_switch_interval_and_record_the_fill_usage():
    import torch

    class Result:
        prefill_s = 0.001

    class Eng:
        def __init__(self):
            self.seen = []

        def generate(self, prompts, n, stop_at_eos):
            self.seen.append((torch.get_num_threads(), sys.getswitchinterval()))
            return Result()

    engines = {"vllm": Eng(), "latency": Eng()}
    threads, switch = torch.get_num_threads(), sys.getswitchinterval()
    steps = pc.rounds(engines, [1, 2], 4, 0.0, lambda: None, threads=1, switch_s=0.0005)
    assert torch.get_num_threads() == threads and sys.getswitchinterval() == switch
    assert all(seen == (1, 0.0005) for e in engines.values() for seen in e.seen)
    assert [len(v) for v in steps.values()] == [4, 4]
    assert all(s[f"fill_{u}"] == 0 for v in steps.values() for s in v for u in pc.USAGE)  # no graph fill ran


FAKE_SMI = """#!/usr/bin/env python3
import datetime, time
while True:  # what `nvidia-smi --query-gpu=... -lms=N` prints: one CSV line of the fields a tick, until terminated
    t = datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    print(f"{t}, 1755, 3201, 650.5, 44, 0x0000000000000004", flush=True)
    time.sleep(0.01)
"""


def test_a_cpu_run_end_to_end_attributes_the_drivers_samples_to_its_steps(tmp_path, monkeypatch):
    """The whole tool on CPU (the tiny model, one selection): the host phases, the rounds back to back and after a
    pause, each timed step given the samples of an `nvidia-smi` that a script on PATH stands in for; the record's
    JSON, its Markdown and the raw samples are written."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{__import__('os').environ['PATH']}")
    out = tmp_path / "out"
    assert pc.main(["--out", str(out), "--preset", "gemma4_tiny", "--selections", "vllm", "--kv", "auto", "--len", "16",
                    "--rounds", "3", "--pause-rounds", "1", "--pause-s", "0.01", "--phase-reps", "1",
                    "--platform", "cpu", "--no-freeze"]) == 0
    import json

    d = json.loads((out / "prefill_clocks.json").read_text())
    [cell] = d["cells"]
    assert "error" not in cell and cell["phases"]["vllm"]["total, synced phases"] > 0
    assert set(cell["rounds"]) == {"back to back", "pause 0.01 s"}
    b2b = cell["rounds"]["back to back"]["vllm"]
    assert b2b["steps"] == 3 and b2b["rest_sm_mhz"] == 1755.0 and b2b["reasons_rest"] == ["sw power cap"]
    assert cell["smi_samples"]["back to back"] > 0 and all(s["samples"] >= 1 for s in cell["steps"]["back to back"]["vllm"])
    assert "| back to back | vllm | 3 |" in (out / "prefill_clocks.md").read_text()
    assert "1755" in (out / "smi_auto.csv").read_text()
