"""`kselect perf` on CPU: times verified claims' kernels (TORCH_REFERENCE, eager) into a valid, merged perf file."""

from __future__ import annotations

import time

import pytest
import yaml

from kselect.commands import perf as perf_command
from kselect.measurement import perf_targets as targeting
from kselect.measurement import perf_timing as timing
from kselect.selector.evidence import perf_data as perf


@pytest.fixture
def conformance_file(tmp_path):
    claims = {
        "TORCH_REFERENCE:bf16:d64:window": {"status": "verified"},  # gemma4_tiny sliding: d64, window 16
        "TORCH_REFERENCE:bf16:d128:causal": {"status": "verified"},  # full: d128
        "TORCH_REFERENCE:fp8:d128:causal": {"status": "refuted"},  # never timed
        "TORCH_REFERENCE:fp8:d64:causal": {"status": "verified"},  # a feature the sliding group does not use
    }
    p = tmp_path / "fake.yaml"
    p.write_text(yaml.safe_dump({"gpu": "fake", "claim_count": len(claims), "claims": claims}))
    return p


def run(tmp_path, conf, *extra):
    out = tmp_path / "perf" / "fake.yaml"
    rc = perf_command.main(["--gpu-name", "fake", "--conformance", str(conf), "--out", str(out), "--models", "gemma4_tiny",
                      "--device", "cpu", "--reps", "1", *extra])
    assert rc == 0
    return out


def test_runner_writes_one_valid_entry_per_verified_target_and_bucket(tmp_path, conformance_file):
    out = run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "1x16")
    data = perf.load("fake", out.parent)
    assert sorted(data.entries) == [
        "TORCH_REFERENCE:bf16:d128:full:decode:b1:c32:h4x1:p16", "TORCH_REFERENCE:bf16:d128:full:prefill:b1:c16:h4x1:p16",
        "TORCH_REFERENCE:bf16:d64:w16:decode:b1:c32:h4x2:p16", "TORCH_REFERENCE:bf16:d64:w16:prefill:b1:c16:h4x2:p16"]
    e = data.entries["TORCH_REFERENCE:bf16:d64:w16:decode:b1:c32:h4x2:p16"]
    assert e.ms > 0 and not e.graph and e.gpu == "fake" and e.date and "torch" in e.versions
    assert (e.kernel, e.kv, e.head, e.window, e.page, e.num_q_heads) == ("TORCH_REFERENCE", "bf16", 64, 16, 16, 4)
    # prefill runs eagerly in the engine: its buckets also carry one eager call's host time; decode's do not
    assert e.host_ms is None and data.entries["TORCH_REFERENCE:bf16:d64:w16:prefill:b1:c16:h4x2:p16"].host_ms > 0
    assert data.command.startswith("kselect perf --gpu-name fake") and data.torch
    # merged: a second run with another bucket keeps the first run's entries; written atomically (no temp left)
    run(tmp_path, conformance_file, "--decode", "2x64", "--prefill", "", "--kv", "bf16")
    merged = perf.load("fake", out.parent)
    assert len(merged.entries) == 6 and "TORCH_REFERENCE:bf16:d128:full:decode:b2:c64:h4x1:p16" in merged.entries
    assert [p.name for p in out.parent.iterdir()] == ["fake.yaml"]


def test_bad_bucket_and_missing_conformance_are_refused(tmp_path, conformance_file, capsys):
    with pytest.raises(SystemExit, match="bad bucket '1y2'"):
        run(tmp_path, conformance_file, "--decode", "1y2")
    assert perf_command.main(["--gpu-name", "nope", "--conformance", str(tmp_path / "none.yaml"), "--device", "cpu"]) == 2
    assert "run `kselect conformance` first" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value,allowed", [
    ("--context-spread", "5", "up to, not including, 1"), ("--context-spread", "nan", "up to, not including, 1"),
    ("--max-page", "0", "1 to 4096"), ("--reps", "0", "1 to 1000"), ("--warm-jobs", "99", "0 to 64"),
    ("--budget-s", "0", "more than 0"),
])  # fmt: skip
def test_a_number_no_timing_can_mean_is_refused_even_in_a_dry_run(flag, value, allowed, tmp_path, conformance_file,
                                                                    capsys):
    # before: accepted (a spread of 5 reads contexts below zero; 0 reps time nothing), exit 0 in a dry run
    from kselect.selector.base.cli_errors import call_main

    argv = ["--gpu-name", "fake", "--conformance", str(conformance_file), "--out", str(tmp_path / "p.yaml"),
            "--models", "gemma4_tiny", "--device", "cpu", "--dry-run", flag, value]
    assert call_main(perf_command.main, argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} " in err and f"allowed: " in err and allowed in err and "Traceback" not in err, err
    assert not (tmp_path / "p.yaml").exists()


def test_a_perf_file_whose_key_lies_is_refused(tmp_path):
    from kselect.selector.base.errors import ConfigError

    e = perf.PerfEntry(kernel="X", build="X", kv="bf16", head=64, phase="decode", batch=1, context=8, num_q_heads=1,
                       num_kv_heads=1, page=16, ms=1.0, graph=False, gpu="g", date="d")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"gpu": "g", "entries": {"wrong": e.model_dump(mode="json")}}))
    with pytest.raises(ConfigError, match="the entry's own bucket id"):
        perf.load("g", tmp_path)


def test_missing_times_only_the_buckets_the_file_lacks(tmp_path, conformance_file, capsys):
    out = run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "")
    first = perf.load("fake", out.parent).entries
    capsys.readouterr()
    run(tmp_path, conformance_file, "--decode", "1x32,2x32", "--prefill", "", "--missing")
    log = capsys.readouterr().out
    assert "--missing: 2 buckets of 2 targets" in log
    assert "decode:b1:c32" not in log  # already measured: not timed again
    data = perf.load("fake", out.parent).entries
    assert len(data) == 4 and all(data[k] == first[k] for k in first)  # the old entries are kept as they were


def test_missing_retimes_prefill_buckets_without_host_time(tmp_path, conformance_file, capsys):
    out = run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "1x16", "--kv", "bf16")
    doc = yaml.safe_load(out.read_text())
    old = "TORCH_REFERENCE:bf16:d64:w16:prefill:b1:c16:h4x2:p16"
    del doc["entries"][old]["host_ms"]  # a file written before host times were measured
    out.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "1x16", "--kv", "bf16", "--missing")
    log = capsys.readouterr().out
    assert "--missing: 1 buckets of 1 targets" in log and "decode:b1:c32" not in log
    assert perf.load("fake", out.parent).entries[old].host_ms > 0
    # a graph-timed prefill bucket from before plan times were measured is missing too (CPU buckets are eager)
    doc = yaml.safe_load(out.read_text())
    doc["entries"][old]["graph"] = True
    out.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "1x16", "--kv", "bf16", "--missing")
    assert "--missing: 1 buckets of 1 targets" in capsys.readouterr().out


def test_targets_time_each_claim_as_conformance_runs_it_at_every_reachable_page():
    """Descale mode and the first page come from the claim's own run (selector/measure/claims.py), so a composite
    times its causal child as conformance verified it: the FA4 fork's FP8 path needs 64-token pages,
    vLLM's FA3 FP8 path a quantized query. Every other page a combination of pins can run the kernel at
    for the model (selector/measure/reachable.py) is timed too, up to --max-page: the objective reads a figure
    only at the page a group runs."""
    ids = {"TRITON_FLASH_ATTN_v4:fp8:d512:causal", "TRITON_FLASH_ATTN_v3:fp8:d256:window",
           "TRITON_ATTN:bf16:d256:window"}
    got = {(t.path, t.kv, t.head, t.page): t.descale for t in targeting.targets(ids, ["gemma4_31b"], None, None, "sm90")}
    # the composite is vLLM's choice in multimodal cells, which reach its FA3 path at 64 and 128-token pages
    assert got == {("TRITON_FLASH_ATTN_v4", "fp8", 512, 64): "kv_dequant",
                   **{("TRITON_FLASH_ATTN_v3", "fp8", 256, p): "q_k_v" for p in (16, 64, 128)},
                   **{("TRITON_ATTN", "bf16", 256, p): "none" for p in (16, 32, 64, 128)}}
    capped = targeting.targets(ids, ["gemma4_31b"], {"TRITON_ATTN"}, None, "sm90", max_page=32)
    assert sorted(t.page for t in capped) == [16, 32]
    # the same kernel at another page is another bucket
    a, b = (targeting.bucket_of(t, "decode", 1, 512) for t in capped)
    assert a.endswith(":p16") and b.endswith(":p32")


def test_another_build_is_timed_at_the_pages_vllms_build_of_it_reaches_under_its_own_buckets():
    """A verified `FLASH_ATTN_v3+upstream` claim (flash-attention's FA3) is a target of its own: the same pages as
    vLLM's FA3 build at the model's shapes, its own bucket ids, and a backend made on that build."""
    ids = {"FLASH_ATTN_v3:fp8:d256:window", "FLASH_ATTN_v3+upstream:fp8:d256:window"}
    ts = targeting.targets(ids, ["gemma4_31b"], None, None, "sm90")
    pages = lambda build: sorted(t.page for t in ts if t.build == build)  # noqa: E731
    assert pages("upstream") == pages(None) and pages(None)
    up = next(t for t in ts if t.build == "upstream")
    assert up.path == "FLASH_ATTN_v3+upstream" and up.descale == "q_k_v"
    assert targeting.bucket_of(up, "prefill", 1, 4096).startswith("FLASH_ATTN_v3+upstream:fp8:d256:w1024:prefill:")
    only = targeting.targets(ids, ["gemma4_31b"], {"FLASH_ATTN_v3+upstream"}, None, "sm90")
    assert only and all(t.build == "upstream" for t in only)


def test_steps_merge_beside_the_kernel_entries_and_keys_are_checked(tmp_path, conformance_file):
    out = run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "")
    st = perf.StepEntry(model="gemma4_e4b", phase="prefill", batch=1, context=512, backends="x", wall_ms=27.1,
                        kernel_ms=9.0, attention_ms=1.0, gpu="fake", date="d")
    header = {"gpu": "fake"}
    perf.merge_write(out, header, {}, {st.key: st})
    data = perf.load("fake", out.parent)
    assert len(data.entries) == 2 and data.steps[st.key].host_bound  # 27.1 ms of wall over 9 ms of kernels
    assert perf.nearest_step(data, "gemma4_e4b", "prefill", 1, 544) == st
    assert perf.nearest_step(data, "gemma4_e4b", "prefill", 1, 4096) is None  # 8x away: not covered
    assert not st.model_copy(update={"wall_ms": 10.0}).host_bound
    doc = yaml.safe_load(out.read_text())
    doc["steps"]["wrong"] = doc["steps"].pop(st.key)
    out.write_text(yaml.safe_dump(doc))
    from kselect.selector.base.errors import ConfigError

    with pytest.raises(ConfigError, match="the step's own id"):
        perf.load("fake", out.parent)


def test_perf_steps_needs_a_gpu_and_says_so(capsys):
    import torch

    from kselect.commands import perf_steps

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert perf_steps.main(["--gpu-name", "fake"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_spread_contexts_cover_the_range_around_the_bucket():
    assert timing.spread_contexts(544, 1, 0.25) == [544] and timing.spread_contexts(544, 4, 0.0) == [544] * 4
    cs = timing.spread_contexts(512, 5, 0.125)
    assert cs == [448, 480, 512, 544, 576] and sum(cs) / len(cs) == 512


def test_context_spread_times_a_range_and_is_recorded_on_decode_entries(tmp_path, conformance_file, monkeypatch):
    seen = []  # (q_len, context) of every input set the runner builds
    make = timing.make_inputs
    monkeypatch.setattr(timing, "make_inputs", lambda t, b, c, q, *a, **k: seen.append((q, c)) or make(t, b, c, q, *a, **k))
    out = run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "1x16", "--kv", "bf16", "--context-spread", "0.25")
    decode = sorted({c for q, c in seen if q == 1})
    assert decode[0] == 24 and decode[-1] == 40 and len(decode) > 2  # 32 x (1 +- 0.25)
    assert {c for q, c in seen if q > 1} == {16}  # prefill: its one prompt length
    entries = perf.load("fake", out.parent).entries.values()
    assert {(e.phase, e.context_spread) for e in entries} == {("decode", 0.25), ("prefill", 0.0)}
    assert all(e.ms > 0 for e in entries)


def test_fence_is_parsed_checked_and_builds_the_work_it_names(tmp_path, conformance_file, capsys):
    import torch

    assert timing.parse_fence("") is None and timing.parse_fence("gemv:512") == ("gemv", 512)
    for bad in ("gemv", "gemv:0", "read:64", "write:-1", "write:1.5"):
        with pytest.raises(ValueError, match="expected KIND:MIB"):
            timing.parse_fence(bad)
    assert perf_command.main(["--gpu-name", "fake", "--conformance", str(conformance_file), "--device", "cpu",
                        "--fence", "gemv:0"]) == 2
    assert "--fence 'gemv:0'" in capsys.readouterr().err
    # the fence does its bytes of work: a gemv reads MIB of bf16 weights, a write zeroes MIB
    w = timing.make_fence(("write", 1), "cpu")
    assert w.__self__.numel() * 4 == 1 << 20 and w().abs().sum() == 0
    out = timing.make_fence(("gemv", 1), "cpu")()
    assert out.dtype == torch.bfloat16 and out.shape == (1, (1 << 20) // (2 * 8192))
    # layer: the same GEMV, then a small kernel that reads its output (what the model runs before attention)
    assert timing.parse_fence("layer:1024") == ("layer", 1024)
    tail = timing.make_fence(("layer", 1), "cpu")()
    assert tail.shape == (1, 64) and tail.abs().sum() > 0
    # in prefill a layer fence runs the call's query rows through those weights (a GEMM, as the model's layer
    # at the prompt's tokens); a gemv fence stays one row whatever the rows
    assert timing.make_fence(("layer", 1), "cpu", rows=12)().shape == (12, 64)
    assert timing.make_fence(("gemv", 1), "cpu", rows=12)().shape == (1, 64)
    # CPU entries are timed back to back: the fence is not applied there, and the entry says so
    run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "", "--kv", "bf16", "--fence", "write:1")
    assert "CUDA-graph timing only" in capsys.readouterr().err
    assert {e.fence for e in perf.load("fake", tmp_path / "perf").entries.values()} == {""}
    # prefill buckets alone (bench/results/h200/splits/, Q31): an empty decode grid times none
    out = run(tmp_path / "q", conformance_file, "--decode", "", "--prefill", "1x24", "--kv", "bf16")
    assert {e.phase for e in perf.load("fake", out.parent).entries.values()} == {"prefill"}


def test_a_perf_entry_names_its_fence_or_is_refused():
    e = dict(kernel="TORCH_REFERENCE", build="b", versions={}, kv="bf16", head=64, window=None, phase="decode", batch=1,
             context=32, num_q_heads=4, num_kv_heads=1, page=16, ms=0.1, graph=True, gpu="fake", date="2026-12-01")
    assert perf.PerfEntry(**e, fence="gemv:512").fence == "gemv:512"
    assert perf.PerfEntry(**e, fence="layer:1024").fence == "layer:1024"
    for bad in ("gemv:0", "read:64", "gemv", "layer"):
        with pytest.raises(ValueError):
            perf.PerfEntry(**e, fence=bad)


def test_a_perf_entry_of_a_build_nothing_runs_is_refused(tmp_path):
    """A bucket of a build ALT_BUILDS does not list (FA4 has none besides vLLM's) would never be read: the file is
    refused, naming the file, the path and what is allowed; a known build loads."""
    from kselect.selector.base.errors import ConfigError

    e = dict(build="b", kv="bf16", head=64, phase="decode", batch=1, context=8, num_q_heads=1, num_kv_heads=1, page=16,
             ms=1.0, graph=False, gpu="g", date="d")
    for path, ok in (("FLASH_ATTN_v3+upstream", True), ("FLASH_ATTN_v4+upstream", False), ("FLASHINFER+mine", False)):
        if not ok:
            with pytest.raises(ValueError, match="allowed: none"):
                perf.PerfEntry(kernel=path, **e)
            continue
        entry = perf.PerfEntry(kernel=path, **e)
        (tmp_path / "g.yaml").write_text(yaml.safe_dump({"gpu": "g", "entries": {entry.bucket: entry.model_dump(mode="json")}}))
        assert perf.load("g", tmp_path).entries[entry.bucket].kernel == path
    doc = yaml.safe_load((tmp_path / "g.yaml").read_text())
    doc["entries"] = {k.replace("_v3", "_v4"): {**v, "kernel": "FLASH_ATTN_v4+upstream"} for k, v in doc["entries"].items()}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"g\.yaml.*FLASH_ATTN_v4\+upstream.*allowed: none"):
        perf.load("g", tmp_path)


def test_a_layer_fenced_figure_is_the_calls_kernels_on_the_timeline():
    """The calls' kernels and the launch gap before each, per call; the fence's kernels (named by profiling
    one fence alone) are not the call's, however long the GEMV takes."""
    from types import SimpleNamespace

    import torch

    cuda = torch.autograd.DeviceType.CUDA

    def ev(name, a, b):
        return SimpleNamespace(name=name, device_type=cuda, time_range=SimpleNamespace(start=a, end=b))

    fence = {"nvjet_gemv", "copy_kernel"}
    # us: two calls, each after a GEMV (jittering 250 / 260 us) and its tail copy; each call is a 2 us
    # prepare kernel 1 us after the copy, then a 10 us main kernel 1 us after it
    events, t = [], 0
    for gemv in (250, 260):
        events += [ev("nvjet_gemv", t, t + gemv), ev("copy_kernel", t + gemv, t + gemv + 2)]
        t += gemv + 2
        events += [ev("prepare", t + 1, t + 3), ev("fwd", t + 4, t + 14)]
        t += 14
    assert abs(timing.calls_timeline_ms(events, fence, 2) - (1 + 2 + 1 + 10) / 1e3) < 1e-12
    with pytest.raises(RuntimeError, match="none of the calls' kernels"):
        timing.calls_timeline_ms([e for e in events if e.name in fence], fence, 2)


def test_a_layer_fenced_figure_refuses_to_run_inside_another_profiler():
    """kineto does not nest: the figure is read from its own profile, so under another it says so."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="inside another profiler"):
            timing._fenced_timeline_ms(None, None, 1, 1)


@pytest.mark.parametrize("descale, q_dtype", [("q_k_v", "float8_e4m3fn"), ("kv_dequant", "bfloat16")])
def test_quant_query_targets_are_timed_on_the_fp8_q_the_model_hands_them(descale, q_dtype):
    """The fused q/k/v kernel quantizes q for a quant-query backend (gemma4/fused.py), so its bucket times
    the kernel on an FP8 q, with no quantize kernel of its own; other paths get q in the model dtype."""
    import torch

    from kselect.kernels.cache_ops import quantize_query

    t = targeting.Target("TORCH_REFERENCE", None, "fp8_e4m3", 64, 4, 2, None, 16, descale)
    s = timing.make_inputs(t, 1, 32, 1, "cpu", seed=0)
    assert s["q"].dtype == getattr(torch, q_dtype) and s["layer"].out_dtype == torch.bfloat16
    if descale == "q_k_v":
        from dataclasses import replace

        bf16 = timing.make_inputs(replace(t, descale="k_v"), 1, 32, 1, "cpu", seed=0)["q"]
        assert torch.equal(s["q"].view(torch.uint8), quantize_query(bf16, s["layer"].q_scale, s["q"].dtype).view(torch.uint8))


def test_a_backend_that_plans_on_the_host_has_its_plan_timed(monkeypatch):
    """plan_ms: the host time of prepare_replay after the calls ran, once per input set and rep (what a
    graph-replayed prefill step spends on the host per group before its replay)."""
    import torch

    calls = []

    class Planner:
        def prepare_replay(self, meta, seqused, table):
            calls.append((list(seqused), tuple(table.shape)))
            time.sleep(0.002)

    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    t = targeting.Target("TORCH_REFERENCE", None, "bf16", 64, 4, 2, None, 16, "none")
    sets = [timing.make_inputs(t, 2, c, c, "cpu", seed=0) for c in (32, 48)]
    ms = timing.plan_ms(Planner(), sets, [32, 48], 2, reps=3)
    assert 2.0 <= ms < 50 and len(calls) == 6 and calls[:2] == [([32, 32], (2, 2)), ([48, 48], (2, 3))]


@pytest.mark.parametrize("command", ["perf", "perf-steps"])
def test_a_bad_gpu_name_exits_2_with_one_paragraph(command):
    """`--gpu-name` names a file in conf/: a path is refused by name, with what is allowed, and no traceback (the
    runners' errors went through `raise SystemExit(main())`, which printed one)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kselect.cli", command, "--gpu-name", "../etc"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--gpu-name" in r.stderr and "'../etc'" in r.stderr and "allowed" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flag,value", [("--kernels", "FLASH_ATTN_v3+bogus,FLASHINFER"), ("--kv", "bf8")])
def test_a_kernel_or_dtype_no_verified_claim_has_exits_2_naming_what_is_allowed(tmp_path, flag, value):
    """A typo in --kernels or --kv timed nothing and still wrote the file (exit 0); it is refused, naming the value,
    the conformance file and the allowed values, and nothing is written."""
    import subprocess
    import sys

    out = tmp_path / "p.yaml"
    r = subprocess.run([sys.executable, "-m", "kselect.cli", "perf", "--gpu-name", "nvidia_h200", flag, value, "--out",
                        str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    bad = value.split(",")[0]
    assert f"{flag} {bad}:" in r.stderr and "nvidia_h200.yaml" in r.stderr and "allowed:" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_runner_times_on_the_threads_an_engine_on_that_device_serves_with(tmp_path, conformance_file, capsys,
                                                                          monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run(tmp_path, conformance_file, "--decode", "1x32", "--prefill", "")
        assert "intra-op CPU threads: 2" in capsys.readouterr().out and torch.get_num_threads() == 2  # CPU: kept
    finally:
        torch.set_num_threads(before)
