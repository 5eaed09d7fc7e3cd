"""objective=latency|throughput|capacity on a fake GPU (perf_fakes.py): the fastest verified kernel per
group and phase, tie-breaking by vLLM's priority, the missing-data warning, never an unverified kernel."""

from __future__ import annotations

import json

import pytest

from kselect.selector.api import Evidence, compose, resolve
from kselect.selector.export.formats import render

from perf_fakes import FEATURES, GPU, entry as E, step, write_conformance, write_perf

# the seed's rules, without FlashInfer's SM90 builder check (vLLM 0.28.0 refuses FlashInfer's sliding-window
# layers there): these rows measure the choice among kernels, FlashInfer's included (test_seed_era.py has the check)
BASE = ["rules=post_pr52987", "platform=sm90", f"platform.gpu_model={GPU}", "model=gemma4_31b"]
NO_FI_SM90_SWA = "rules.flashinfer-sm90_sliding_window_builder.enabled=false"  # a rule of rules=post_pr52987 only
# sliding decode: FLASHINFER and TRITON_ATTN within 3% (a tie); full decode: TRITON_ATTN fastest but unverified
BUCKETS = [
    E("FLASH_ATTN_v4", 256, "decode", 0.10), E("FLASHINFER", 256, "decode", 0.080), E("TRITON_ATTN", 256, "decode", 0.079),
    E("FLASH_ATTN_v4", 512, "decode", 0.30), E("FLASHINFER", 512, "decode", 0.25), E("TRITON_ATTN", 512, "decode", 0.10),
    E("FLASH_ATTN_v4", 256, "prefill", 0.5), E("FLASHINFER", 256, "prefill", 0.9), E("TRITON_ATTN", 256, "prefill", 1.0),
    E("FLASHINFER", 512, "prefill", 2.0), E("TRITON_ATTN", 512, "prefill", 1.0),
]


FAKE = {}  # "dir": the fake GPU's evidence folder (conformance/, perf/) of the running test


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """make(buckets, steps, **conformance) writes the fake GPU's files; run/export/evidence() read them."""
    cdir, pdir = tmp_path / "conformance", tmp_path / "perf"
    cdir.mkdir()
    pdir.mkdir()
    monkeypatch.setitem(FAKE, "dir", tmp_path)

    def make(buckets=BUCKETS, steps=(), **conf):
        write_conformance(cdir, **conf)
        write_perf(pdir, buckets, steps)
        return pdir

    return make


def evidence() -> Evidence:
    """The fake GPU's files as written now (a new value after each make(): Evidence reads a file once)."""
    return Evidence.load(FAKE["dir"]) if "dir" in FAKE else Evidence.none()


def _over(over) -> list[str]:
    return [*BASE, *over] if any(o.startswith("rules=") for o in over) else [*BASE, NO_FI_SM90_SWA, *over]


def run(*over):
    return resolve(compose(_over(over)), evidence())


def export(*over) -> str:
    """output=vllm of a selection (the export re-resolves its config under vLLM 0.33.0's rules)."""
    cfg = compose(_over(over))
    return render(resolve(cfg, evidence()), "vllm", cfg=cfg)


def test_vllm_objective_is_the_faithful_selection(fake_gpu):
    fake_gpu()
    a, b = run(), run("objective=vllm")
    assert a == b and all(not g.measured and g.prefill is None for g in a.groups)
    assert "objective" not in a.environment and "measured" not in json.loads(render(a, "json"))["groups"][0]


def test_latency_picks_fastest_verified_per_group_and_phase(fake_gpu):
    fake_gpu()
    sel = run("objective=latency")
    sw, full = sel.group("sliding_window"), sel.group("full_attention")
    assert (sw.backend, full.backend) == ("FLASHINFER", "FLASHINFER")  # vLLM's own choice is FLASH_ATTN v4
    dec = {m.phase: m for m in sw.measured}["decode"]
    assert dec.chosen.ms == 0.080 and dec.vllm.backend == "FLASH_ATTN v4" and dec.vllm.ms == 0.10
    assert dec.chosen.bucket == "FLASHINFER:bf16:d256:w1024:decode:b1:c8192:h32x16:p16"
    # per phase: sliding prefill runs FA4 over FlashInfer's cache layout (same kv block, same dtype)
    assert sw.prefill is not None and (sw.prefill.backend, sw.prefill.flash_attn_version) == ("FLASH_ATTN", 4)
    assert sw.prefill.kv_block_size == sw.kv_block_size and sw.prefill.kv_cache_dtype == sw.kv_cache_dtype
    pre = {m.phase: m for m in sw.measured}["prefill"]
    assert pre.chosen.ms == 0.5 and pre.runner_up.backend == "FLASHINFER"
    assert "objective.latency:decode" in sw.trace and sel.environment["objective"] == "latency"
    text = render(sel, "table")
    assert "runner-up TRITON_ATTN 0.079 ms" in text and "prefill on: FLASH_ATTN v4" in text


def test_tie_within_tolerance_goes_to_vllm_priority(fake_gpu):
    fake_gpu()
    dec = {m.phase: m for m in run("objective=latency").group("sliding_window").measured}["decode"]
    assert dec.backend == "FLASHINFER" and dec.runner_up.backend == "TRITON_ATTN" and dec.runner_up.ms < dec.chosen.ms
    assert "priority order" in dec.why
    # no tolerance: the measured 1% wins
    assert run("objective=latency", "objective.tie=0").group("sliding_window").backend == "TRITON_ATTN"


def test_never_an_unverified_kernel(fake_gpu):
    fake_gpu()  # TRITON_ATTN d512 is the fastest full-layer kernel in the perf file, but conformance never ran it
    full = run("objective=latency").group("full_attention")
    assert full.backend == "FLASHINFER"
    assert any("TRITON_ATTN not chosen: not verified" in r for r in full.reasons)
    assert all(c.status == "verified" for c in full.claims)
    # refuted is out too: FLASHINFER refuted everywhere -> TRITON_ATTN sliding, FA4 full
    fake_gpu(refuted=("FLASHINFER",))
    sel = run("objective=latency", "objective.tie=0")
    assert [g.backend for g in sel.groups] == ["TRITON_ATTN", "FLASH_ATTN"]
    assert all(c.status == "verified" for g in sel.groups for c in g.claims)


def test_missing_measurement_warns_and_never_guesses(fake_gpu):
    fake_gpu(buckets=[b for b in BUCKETS if b.kernel != "FLASHINFER"])
    sw = run("objective=latency").group("sliding_window")
    assert sw.backend == "TRITON_ATTN"  # FLASHINFER has no data: left out, not guessed
    w = next(w for w in sw.warnings if w.code == "objective_no_measurement" and w.backend == "FLASHINFER")
    assert (w.phase, w.objective) == ("decode", "latency") and w.shape.startswith("B1 x 8192 (d256, bf16, 16 KV heads")
    assert "FLASHINFER left out of decode: no measurement covers B1 x 8192" in w.text
    # a shape far from every bucket (batch 256 vs 1): no figure at all, vLLM's choice kept, with a warning
    sel = run("objective=latency", "objective.decode.batch=256")
    assert [g.backend for g in sel.groups] == ["FLASH_ATTN", "FLASH_ATTN"]
    assert any("kept vLLM's selection (no guess)" in w.text for w in sel.warnings)


def test_nearest_bucket_and_throughput_point(fake_gpu):
    fake_gpu(buckets=[*BUCKETS, E("FLASH_ATTN_v4", 256, "decode", 0.2, batch=64), E("FLASHINFER", 256, "decode", 0.5, batch=64),
                      E("TRITON_ATTN", 256, "decode", 0.6, batch=64), E("FLASHINFER", 512, "decode", 0.9, batch=64),
                      E("FLASH_ATTN_v4", 512, "decode", 0.95, batch=64)])
    sel = run("objective=throughput")  # B64: FA4 wins the sliding group, FLASHINFER the full one
    assert [g.backend for g in sel.groups] == ["FLASH_ATTN", "FLASHINFER"]
    assert {m.phase: m for m in sel.groups[0].measured}["decode"].chosen.bucket.endswith(":b64:c8192:h32x16:p16")
    # B32 is nearer B64 than B1 (log distance)
    assert run("objective=latency", "objective.decode.batch=32").groups[0].backend == "FLASH_ATTN"


def test_per_phase_pair_refused_when_layouts_differ(fake_gpu):
    # FP8 cache: vLLM's FA4-fork FP8 path needs 64-token kernel blocks (pr48666's rule); a FLASHINFER decode cache
    # of 16-token blocks cannot be read by it for prefill: refused with the reason, never a mixed layout
    fake_gpu(buckets=[*BUCKETS, E("FLASHINFER", 256, "decode", 0.05, kv="fp8"), E("FLASH_ATTN_v4", 256, "prefill", 0.1, kv="fp8"),
                      E("FLASHINFER", 256, "prefill", 0.9, kv="fp8"), E("FLASHINFER", 512, "decode", 0.2, kv="fp8"),
                      E("FLASHINFER", 512, "prefill", 2.0, kv="fp8")])
    sel = run("objective=latency", "kv_cache=fp8", "overlay=[pr48666]")
    for g in sel.groups:
        if g.prefill is not None:
            assert (g.prefill.kv_block_size, g.prefill.kv_cache_dtype) == (g.kv_block_size, g.kv_cache_dtype)
    sw = sel.group("sliding_window")
    assert sw.backend == "FLASHINFER"
    assert sw.prefill is None or sw.prefill.kv_block_size == sw.kv_block_size


def test_capacity_switches_to_a_verified_fp8_cache(fake_gpu):
    fake_gpu(buckets=[*BUCKETS, E("FLASHINFER", 256, "decode", 0.5, kv="fp8", batch=64),
                      E("FLASHINFER", 512, "decode", 0.8, kv="fp8", batch=64)])
    sel = run("objective=capacity")
    assert {g.kv_cache_dtype for g in sel.groups} == {"fp8_e4m3"}
    assert any("holds 2.0x the tokens of bfloat16" in r and "rel err" in r for r in sel.groups[0].reasons)
    assert "--kv-cache-dtype fp8" in export("objective=capacity")
    fake_gpu()  # no FP8 measurement: the bf16 cache stays
    assert {g.kv_cache_dtype for g in run("objective=capacity").groups} == {"bfloat16"}


def test_user_pin_is_respected(fake_gpu):
    fake_gpu()
    sel = run("objective=latency", "attention.backend=TRITON_ATTN")
    assert {g.backend for g in sel.groups} == {"TRITON_ATTN"}
    assert any("every group is pinned" in w.text for w in sel.warnings)


def test_vllm_export_names_per_phase_loss(fake_gpu):
    fake_gpu()
    text = export("objective=latency")
    command = text.split("\n#")[0]  # the fewest arguments vLLM 0.33.0 reproduces the decode backends with
    assert "--attention-config" not in command or "--attention-config '{\"backend\":\"FLASHINFER\"}'" in command
    assert ("# NOT EXPRESSIBLE in vLLM: sliding_window prefills on FLASH_ATTN v4 and decodes on FLASHINFER" in text
            and "FLASH_ATTN v4 0.5 ms vs FLASHINFER 0.9 ms" in text)


def test_explain_answers_the_fp8_question(fake_gpu):
    from kselect.selector.measure.explain import explain, to_text

    fake_gpu(buckets=[*BUCKETS, E("FLASHINFER", 256, "decode", 0.05, kv="fp8"), E("FLASHINFER", 512, "decode", 0.2, kv="fp8"),
                      E("FLASHINFER", 256, "prefill", 0.9, kv="fp8")])
    d = explain(compose(_over(())), evidence())
    bf, f8 = d["caches"]["bfloat16"], d["caches"]["fp8_e4m3"]
    assert bf["bytes_per_token"] == 2 * f8["bytes_per_token"] == 901_120  # 31B: 50 x 2x16x256x2 + 10 x 2x4x512x2
    dec = next(r for r in f8["rows"] if (r["group"], r["phase"]) == ("sliding_window", "decode"))
    assert dec["best"] == {"backend": "FLASHINFER", "ms": 0.05, "bucket": "FLASHINFER:fp8:d256:w1024:decode:b1:c8192:h32x16:p16",
                           "kernel_ms": 0.05, "host_ms": None, "page": 16}  # no host time or plan in this figure: ms is the kernels
    assert dec["best_err"] == 0.02
    text = to_text(d)
    assert "1.60x faster" in text and "decode step, all layers (latency's choice): bfloat16 6.5 ms, fp8 4.5 ms" in text
    assert "2.0x the tokens" in text and "prefill step: not every group is measured (no guess)" in text


def test_explain_gives_the_prefill_headroom_as_a_share_of_the_measured_step(fake_gpu):
    """Headroom: vLLM's prefill kernels vs the fastest verified ones, all layers, and that saving as a share of the
    model's step measured at exactly the prefill point; a step at another context gives no share (no guess)."""
    from kselect.selector.measure.explain import explain, to_text

    extra = [E("FLASH_ATTN_v4", 512, "prefill", 1.5), E("FLASHINFER", 512, "prefill", 1.2)]
    fake_gpu(buckets=[*BUCKETS, *extra], steps=[step(400.0, 390.0)])
    d = explain(compose(_over(())), evidence())
    assert d["steps"]["prefill"]["wall_ms"] == 400.0
    h = d["caches"]["bfloat16"]["prefill_headroom"]  # the record the text is rendered from (JSON output)
    assert (h["vllm_ms"], h["best_ms"], h["step_ms"]) == (40.0, 37.0, 400.0) and h["share"] == pytest.approx(0.0075)
    # sliding: FA4 0.5 ms either way (50 layers); full: vLLM's FA4 1.5 ms vs FLASHINFER 1.2 ms (10 layers)
    assert "prefill headroom (bfloat16): vLLM's choice 40 ms of attention, latency's choice 37 ms: 3 ms saved = 0.75% " \
        "of the model's measured prefill step (400 ms wall, gemma4_31b:prefill:b1:c4096" in to_text(d)
    fake_gpu(buckets=[*BUCKETS, *extra], steps=[step(400.0, 390.0, context=2048)])
    text = to_text(explain(compose(_over(())), evidence()))
    assert "3 ms saved (the model's step at B1 x 4096 is not measured: kselect perf-steps; no share" in text


def test_measured_data_and_objective_flow_through_the_matrix_diff(fake_gpu, tmp_path):
    import shutil

    from kselect.selector.api import CONF_DIR
    from kselect.selector.review.diff import Source, run_diff
    from kselect.selector.review.matrix import MatrixSpec, resolve_cells, expand

    fake_gpu()
    spec = MatrixSpec(axes={"platform": ["sm90"], "model": ["gemma4_31b"]},
                      pins={"vllm": {"platform.gpu_model": GPU}, "latency": {"platform.gpu_model": GPU, "objective.name": "latency"}})
    a, b = tmp_path / "a" / "conf", tmp_path / "b" / "conf"
    for d, fi in ((a, 0.080), (b, 0.2)):  # b: new measurements make FLASHINFER's sliding decode slower than FA4
        shutil.copytree(CONF_DIR, d, ignore=shutil.ignore_patterns("perf"))
        (d / "perf").mkdir()
        shutil.copy(FAKE["dir"] / "conformance" / f"{GPU}.yaml", d / "conformance")  # each side reads its own tree's
        write_perf(d / "perf", [x if (x.kernel, x.head, x.phase) != ("FLASHINFER", 256, "decode") else E("FLASHINFER", 256, "decode", fi)
                                for x in BUCKETS])
    d = run_diff(Source("a", a, ()), Source("b", b, ()), spec)
    moved = [c for c in d.changed if c.selection_changed]
    assert [c.cell.pin for c in moved] == ["latency"]  # the faithful cell never reads measurements
    assert [(c.a, c.b) for line in moved[0].backend for c in line.changes if c.field == "backend"] == [("FLASHINFER", "TRITON_ATTN")]
    # the objective as a matrix axis (pins) and as a diff option
    cells = {r.cell.pin: r.selection for r in resolve_cells(expand(spec), a)}
    assert cells["vllm"].group("sliding_window").backend == "FLASH_ATTN" and cells["latency"].group("sliding_window").backend == "FLASHINFER"
    d2 = run_diff(Source("a", a, ()), Source("a", a, (), objective="latency"), spec)
    assert {c.cell.pin for c in d2.changed if c.selection_changed} == {"vllm"}


def test_fa3_is_a_candidate_where_vllm_takes_an_fa3_pin(fake_gpu):
    # bf16 Gemma-4: the rules force FA4 on every layer unless the user pins flash_attn_version=3 (then only
    # head-512 layers are upgraded). FA3 measured fastest for the sliding group: chosen, as that pin.
    fa3 = [f"FLASH_ATTN_v3:bf16:d256:{f}" for f in FEATURES]
    fake_gpu(buckets=[*BUCKETS, E("FLASH_ATTN_v3", 256, "decode", 0.03), E("FLASH_ATTN_v3", 256, "prefill", 0.6)],
             extra={c: "verified" for c in fa3})
    sel = run("objective=latency")
    sw = sel.group("sliding_window")
    assert (sw.backend, sw.flash_attn_version) == ("FLASH_ATTN", 3) and all(c.status == "verified" for c in sw.claims)
    dec = {m.phase: m for m in sw.measured}["decode"]
    assert dec.chosen.bucket.startswith("FLASH_ATTN_v3:bf16:d256") and dec.vllm.backend == "FLASH_ATTN v4"
    pre = {m.phase: m for m in sw.measured}["prefill"]  # FA4 (0.5 ms) prefills over FA3's cache layout
    assert pre.backend == "FLASH_ATTN v4" and sw.prefill.flash_attn_version == 4
    # exported as vLLM's own FA3 pin (resolved under objective=vllm, not re-measured)
    cmd = export("objective=latency").splitlines()[0]
    assert '"sliding_window":"FLASH_ATTN"' in cmd and '"flash_attn_version":3' in cmd
    # not measured / not verified: never chosen (FA3 is unverified in the default fake conformance)
    fake_gpu(buckets=[*BUCKETS, E("FLASH_ATTN_v3", 256, "decode", 0.03)])
    assert run("objective=latency").group("sliding_window").flash_attn_version != 3
    # a user's version pin is respected: no FA3 candidate beside FA4
    fake_gpu(buckets=[*BUCKETS, E("FLASH_ATTN_v3", 256, "decode", 0.03)], extra={c: "verified" for c in fa3})
    assert run("objective=latency", "attention.flash_attn_version=4").group("sliding_window").flash_attn_version != 3


def test_figures_are_read_at_the_page_a_kernel_runs(fake_gpu):
    # FP8 (pr48666): FLASHINFER decodes fastest; FA4's FP8 path prefills 9x faster but reads 64-token kernel
    # blocks. The objective scores the same decode kernels over every cache block it has figures for.
    def buckets(sw16=0.05, sw64=0.05, full=0.2):
        fi = [E("FLASHINFER", 256, "decode", ms, kv="fp8", page=p) for p, ms in ((16, sw16), (64, sw64)) if ms]
        return [*BUCKETS, *fi, E("FLASHINFER", 512, "decode", full, kv="fp8"),
                E("FLASH_ATTN_v4", 256, "prefill", 0.1, kv="fp8"), E("FLASHINFER", 256, "prefill", 0.9, kv="fp8"),
                E("FLASHINFER", 512, "prefill", 2.0, kv="fp8")]

    fp8 = ("objective=latency", "kv_cache=fp8", "overlay=[pr48666]")
    # FlashInfer as fast over 64-token pages as over 16: the block that lets FA4 prefill over the decode cache wins
    fake_gpu(buckets=buckets())
    sel = run(*fp8)
    sw = sel.group("sliding_window")
    assert [g.backend for g in sel.groups] == ["FLASHINFER", "FLASHINFER"] and sel.block_size == 128
    assert (sw.kernel_block_size, sw.prefill.backend, sw.prefill.kernel_block_size) == (64, "FLASH_ATTN", 64)
    assert (sw.prefill.kv_block_size, sw.prefill.kv_cache_dtype) == (sw.kv_block_size, sw.kv_cache_dtype)
    assert any(r.startswith("cache block 16 -> 128: the same kernels over this block serve the request faster "
                            "(prefill step, all layers: 65 -> 25 ms; decode step 4.5 -> 4.5 ms)") for r in sw.reasons)
    assert {m.phase: m for m in sw.measured}["decode"].chosen.bucket.endswith(":p64")
    assert "--block-size 128" in export(*fp8)
    assert all(c.status == "verified" for g in sel.groups for c in g.claims)
    # 0.03 ms slower a call over 64-token pages: 50 x 0.03 x 256 decode steps outweigh 40 ms of prefill
    fake_gpu(buckets=buckets(sw64=0.08))
    assert run(*fp8).block_size == 16
    assert run(*fp8, "objective.new_tokens=0").block_size == 128  # a prefill-only request: the prefill layout
    # measured at 16-token pages only: its speed over 64 is not guessed, even where only prefill counts
    fake_gpu(buckets=buckets(sw64=0))
    sel = run(*fp8, "objective.new_tokens=0")
    assert sel.group("sliding_window").backend != "FLASHINFER" or sel.block_size == 16
    # FLASHINFER unverified at 64-token pages: never run there, whatever it measured
    fake_gpu(buckets=buckets(), unverified=("TRITON_ATTN:bf16:d512", "FLASHINFER:fp8:d256:page64"))
    sel = run(*fp8)
    assert sel.block_size == 16 and sel.group("sliding_window").prefill is None


def test_the_request_decides_between_decode_and_prefill_layouts(fake_gpu):
    # FP8 (pr48666): FLASHINFER decodes fastest on 16-token pages (measured there only); FA4's FP8 path
    # prefills 9x faster but reads 64-token pages, which only a combination decoding on FA4 gives.
    # Per step: FA4 decode costs 50 x 0.15 = 7.5 ms more, its prefill 50 x 0.8 = 40 ms less.
    fake_gpu(buckets=[*BUCKETS, E("FLASHINFER", 256, "decode", 0.05, kv="fp8", page=16),
                      E("FLASH_ATTN_v4", 256, "decode", 0.2, kv="fp8", page=64),
                      E("FLASH_ATTN_v4", 256, "prefill", 0.1, kv="fp8"), E("FLASHINFER", 256, "prefill", 0.9, kv="fp8"),
                      E("FLASHINFER", 512, "decode", 0.2, kv="fp8"), E("FLASHINFER", 512, "prefill", 2.0, kv="fp8")])
    fp8 = ("objective=latency", "kv_cache=fp8", "overlay=[pr48666]")
    many = run(*fp8)  # conf/objective/latency.yaml: 256 decode steps a request: decode decides
    sw = many.group("sliding_window")
    assert (sw.backend, many.block_size) == ("FLASHINFER", 16) and sw.prefill is None
    note = next(r for r in sw.reasons if r.startswith("request ("))
    assert "prefill + 256 decode steps" in note and "the best over cache block 64 (sliding_window FLASH_ATTN v4" in note
    for n in (0, 4):  # below the break-even (40 / 7.5 = 5.3 steps) the prefill layout wins
        few = run(*fp8, f"objective.new_tokens={n}")
        sw = few.group("sliding_window")
        assert (sw.backend, sw.kernel_block_size, few.block_size) == ("FLASH_ATTN", 64, 64)
        assert (sw.prefill or sw).flash_attn_version == 4
        pre = {m.phase: m for m in sw.measured}["prefill"]
        assert pre.chosen.backend == "FLASH_ATTN v4" and pre.chosen.ms == 0.1
        assert any(f"prefill + {n} decode steps" in r and "the best over cache block 16" in r for r in sw.reasons)
    assert run(*fp8, "objective.new_tokens=6").group("sliding_window").backend == "FLASHINFER"


def test_a_host_bound_prefill_call_costs_its_host_time(fake_gpu):
    # FA4's kernel prefills fastest, but an eager call costs 0.95 ms of host time (CuTe-DSL argument
    # handling). In a host-bound prefill step (wall 27 ms, kernels 9 ms) FlashInfer's 0.9 ms call is then
    # faster end to end; in a GPU-bound step, or with no step measured, the kernel time decides: FA4
    fa4 = E("FLASH_ATTN_v4", 256, "prefill", 0.5).model_copy(update={"host_ms": 0.95})
    buckets = [b for b in BUCKETS if b.bucket != fa4.bucket] + [fa4]
    fake_gpu(buckets=buckets, steps=[step(27.0, 9.0)])
    sw = run("objective=latency").group("sliding_window")
    pre = {m.phase: m for m in sw.measured}["prefill"]
    assert sw.prefill is None and pre.chosen.backend == "FLASHINFER" and pre.chosen.kernel_ms is None
    fa = pre.figure_of("FLASH_ATTN v4")
    assert (fa.ms, fa.kernel_ms) == (0.95, 0.5) and "FLASH_ATTN v4 0.95 ms (host-bound: kernels 0.5 ms)" in fa.text()
    assert pre.step.host_bound and "step gemma4_31b:prefill:b1:c4096 host-bound" in render(run("objective=latency"), "table")
    for steps in ([step(50.0, 48.0)], []):
        fake_gpu(buckets=buckets, steps=steps)
        sw = run("objective=latency").group("sliding_window")
        assert sw.prefill.flash_attn_version == 4 and {m.phase: m for m in sw.measured}["prefill"].chosen.ms == 0.5
    # a step measured at another prompt length far away (> 4x) does not cover this point
    fake_gpu(buckets=buckets, steps=[step(27.0, 9.0, context=512)])
    assert run("objective=latency", "objective.prefill.context=4096").group("sliding_window").prefill.flash_attn_version == 4


def test_a_prefill_that_plans_on_the_host_pays_the_plan_once_a_step(fake_gpu):
    """FlashInfer's kernel prefills fastest here (0.45 ms a layer), but its backend plans on the host before
    every prefill step while the GPU waits (plan_ms, measured by kselect perf in prefill graphs): 5 ms over
    31B's 50 sliding layers is 0.1 ms a call more, and FA4 (0.5) wins. Without a plan figure the kernels decide."""
    fi = E("FLASHINFER", 256, "prefill", 0.45)
    rest = [b for b in BUCKETS if b.bucket != fi.bucket]
    fake_gpu(buckets=rest + [fi])
    pre = {m.phase: m for m in run("objective=latency").group("sliding_window").measured}["prefill"]
    assert pre.chosen.backend == "FLASHINFER" and pre.chosen.plan_ms is None and pre.chosen.ms == 0.45
    fake_gpu(buckets=rest + [fi.model_copy(update={"plan_ms": 5.0})])
    sw = run("objective=latency").group("sliding_window")
    pre = {m.phase: m for m in sw.measured}["prefill"]
    assert (sw.prefill or sw).backend == "FLASH_ATTN" and pre.chosen.backend == "FLASH_ATTN v4"
    f = pre.figure_of("FLASHINFER")
    assert f.ms == pytest.approx(0.45 + 5.0 / 50) and f.kernel_ms == 0.45 and not f.host_bound
    assert "(+ plan 5 ms a step over the group's layers: kernels 0.45 ms)" in f.text()
    # explain's step totals carry the plan; its kernel total (what a profile of the step holds) does not
    from kselect.selector.measure.explain import explain, step

    fake_gpu(buckets=rest + [fi.model_copy(update={"plan_ms": 5.0})], unverified=("TRITON_ATTN", "FLASH_ATTN_v4"))
    rows = explain(compose(_over(())), evidence())["caches"]["bfloat16"]["rows"]
    assert step(rows, "prefill", "best") == pytest.approx(step(rows, "prefill", "best", "kernel_ms") + 5.0)
    # decode figures carry no plan: the host plans a decode step while the GPU runs the previous one (FlashInfer's
    # B1 decode steps in bench/results/h200/splits/E1 cost what its kernels do, no extra millisecond)
    fake_gpu(buckets=[b.model_copy(update={"plan_ms": 5.0}) if b.phase == "decode" else b for b in BUCKETS])
    dec = {m.phase: m for m in run("objective=latency").group("sliding_window").measured}["decode"]
    assert dec.chosen.plan_ms is None and dec.chosen.kernel_ms is None


def test_figures_timed_differently_are_flagged(fake_gpu):
    """A fenced figure (kselect perf --fence) reads slower than a back-to-back one of the same kernel: a group
    whose candidates mix the two is compared unfairly, and says so; timed alike, it does not."""
    fenced = lambda e: e.model_copy(update={"fence": "gemv:1024"})  # noqa: E731
    fake_gpu(buckets=[fenced(b) if (b.kernel, b.head, b.phase) == ("FLASHINFER", 256, "decode") else b for b in BUCKETS])
    sel = run("objective=latency")
    sw, full = sel.group("sliding_window"), sel.group("full_attention")
    w = next(w for w in sw.warnings if w.code == "objective_mixed_timing")
    assert w.phase == "decode" and "gemv:1024: FLASHINFER:bf16:d256" in w.timings and "back to back: " in w.timings
    assert "not timed alike" in w.text and "kselect perf --fence" in w.text
    assert not any(x.code == "objective_mixed_timing" for x in full.warnings)
    dec = {m.phase: m for m in sw.measured}["decode"]
    shown = [f for f in (dec.chosen, dec.runner_up, dec.vllm) if f is not None and f.backend == "FLASHINFER"]
    assert shown and shown[0].text().endswith(", fence gemv:1024]")
    fake_gpu(buckets=[fenced(b) if b.phase == "decode" else b for b in BUCKETS])
    assert not any(x.code == "objective_mixed_timing" for g in run("objective=latency").groups for x in g.warnings)


FA3_FP8 = [f"{p}:fp8:d256:{f}" for p in ("FLASH_ATTN_v3", "FLASH_ATTN_v3+upstream")
           for f in ("causal", "window", "quant_query", "page16", "page32", "page64", "page128")]
FP8_BUCKETS = [  # 31B over an FP8 cache: FlashInfer decodes fastest; upstream FA3 prefills twice as fast as vLLM's FA3
    E("FLASHINFER", 256, "decode", 0.05, kv="fp8"), E("FLASH_ATTN_v3", 256, "decode", 0.10, kv="fp8"),
    E("FLASH_ATTN_v3+upstream", 256, "decode", 0.09, kv="fp8"), E("FLASHINFER", 512, "decode", 0.2, kv="fp8"),
    E("FLASH_ATTN_v4", 512, "decode", 0.3, kv="fp8"),
    E("FLASHINFER", 256, "prefill", 0.9, kv="fp8"), E("FLASH_ATTN_v3", 256, "prefill", 0.8, kv="fp8"),
    E("FLASH_ATTN_v3+upstream", 256, "prefill", 0.4, kv="fp8"), E("FLASHINFER", 512, "prefill", 2.0, kv="fp8"),
    E("FLASH_ATTN_v4", 512, "prefill", 1.9, kv="fp8"),
]
UPSTREAM = ["kv_cache=fp8", "objective=latency", "platform.packages.fa3_upstream=true"]


def test_objective_chooses_another_build_only_installed_verified_and_faster(fake_gpu):
    """Another build of a kernel (FA3 from flash-attention's hopper/) is a candidate when the platform has it, its own
    claims are verified and its figures beat vLLM's build: the sliding group prefills on it. Not installed, or its
    claims unverified: vLLM's FA3 build prefills, and nothing is guessed."""
    fake_gpu(buckets=FP8_BUCKETS, extra={c: "verified" for c in FA3_FP8})
    g = run(*UPSTREAM).group("sliding_window")
    assert (g.backend, g.build) == ("FLASHINFER", None)
    assert (g.prefill.backend, g.prefill.flash_attn_version, g.prefill.build) == ("FLASH_ATTN", 3, "upstream")
    assert {c.claim for c in g.prefill.claims} >= {"FLASH_ATTN_v3+upstream:fp8:d256:window"}
    pre = next(m for m in g.measured if m.phase == "prefill")
    assert pre.chosen.backend == "FLASH_ATTN v3+upstream" and pre.chosen.ms == 0.4
    assert pre.runner_up.backend == "FLASH_ATTN v3" and pre.runner_up.ms == 0.8
    assert "# NOT EXPRESSIBLE in vLLM: sliding_window prefills on FLASH_ATTN v3+upstream and decodes on FLASHINFER" \
        in export(*UPSTREAM)
    not_installed = run("kv_cache=fp8", "objective=latency").group("sliding_window")
    assert (not_installed.prefill.backend, not_installed.prefill.build) == ("FLASH_ATTN", None)
    fake_gpu(buckets=FP8_BUCKETS, extra={c: "verified" for c in FA3_FP8 if "+upstream" not in c})
    unverified = run(*UPSTREAM).group("sliding_window")
    assert (unverified.prefill.backend, unverified.prefill.build) == ("FLASH_ATTN", None)


def test_objective_decoding_on_another_build_names_what_vllm_cannot_run(fake_gpu):
    """A group that decodes on a build vLLM does not ship is exported as the objective's best choice made of vLLM's own
    kernels, with the measured request time and decode gain it loses; the table and JSON name the build."""
    fast = [b if (b.kernel, b.phase, b.head) != ("FLASH_ATTN_v3+upstream", "decode", 256) else
            E("FLASH_ATTN_v3+upstream", 256, "decode", 0.03, kv="fp8") for b in FP8_BUCKETS]
    fake_gpu(buckets=fast, extra={c: "verified" for c in FA3_FP8})
    over = [*UPSTREAM, "rules=vllm_0_33_0"]  # the rules the export resolves under: its blocks are this selection's
    sel = run(*over)
    g = sel.group("sliding_window")
    assert (g.backend, g.flash_attn_version, g.build) == ("FLASH_ATTN", 3, "upstream")
    assert all("+upstream" in c.claim for c in g.claims)
    text = export(*over)
    # the export runs the best choice made of vLLM's own kernels (FlashInfer decodes faster than vLLM's FA3 build)
    assert text.startswith("vllm serve '<model>' --dtype bfloat16 --kv-cache-dtype fp8 --block-size 64 "
                           "--attention-config '{\"backend\":\"FLASHINFER\"}'")
    assert ("# NOT EXPRESSIBLE in vLLM: the objective's best runs a build vLLM does not ship; the command above runs the "
            "best choice made of vLLM's own kernels (sliding_window FLASHINFER, full_attention FLASHINFER), which loses "
            "the measured request time: 1191 vs 935 ms of attention per request (+27.4%)") in text
    assert ("# NOT EXPRESSIBLE in vLLM: sliding_window runs FLASH_ATTN v3+upstream, a build vLLM does not ship; the "
            "command above runs FLASHINFER there; it loses the measured decode gain: FLASH_ATTN v3+upstream "
            "0.03 ms vs FLASHINFER 0.05 ms") in text
    assert json.loads(render(sel, "json"))["groups"][0]["build"] == "upstream"
    assert "3+upstream" in render(sel, "table")
    assert "build" not in json.loads(render(run("kv_cache=fp8"), "json"))["groups"][0]  # vLLM's selection: unchanged


def test_a_move_between_builds_shows_in_the_matrix_diff(fake_gpu, tmp_path):
    """New figures that make vLLM's FA3 build the faster prefill again move the objective's sliding prefill from
    `FLASH_ATTN v3+upstream` to `FLASH_ATTN v3`: the diff names the build, it does not read as unchanged."""
    import shutil

    from kselect.selector.api import CONF_DIR
    from kselect.selector.review.diff import Source, run_diff
    from kselect.selector.review.matrix import MatrixSpec

    fake_gpu(buckets=FP8_BUCKETS, extra={c: "verified" for c in FA3_FP8})
    spec = MatrixSpec(axes={"platform": ["sm90"], "model": ["gemma4_31b"], "kv_cache": ["fp8"]},
                      pins={"latency": {"platform.gpu_model": GPU, "objective.name": "latency",
                                        "platform.packages.fa3_upstream": True}})
    a, b = tmp_path / "a" / "conf", tmp_path / "b" / "conf"
    for d, up in ((a, 0.4), (b, 0.9)):  # b: the upstream build's prefill re-measured slower than vLLM's (0.8)
        shutil.copytree(CONF_DIR, d, ignore=shutil.ignore_patterns("perf"))
        (d / "perf").mkdir()
        shutil.copy(FAKE["dir"] / "conformance" / f"{GPU}.yaml", d / "conformance")  # each side reads its own tree's
        write_perf(d / "perf", [x if (x.kernel, x.phase) != ("FLASH_ATTN_v3+upstream", "prefill") else
                                E("FLASH_ATTN_v3+upstream", 256, "prefill", up, kv="fp8") for x in FP8_BUCKETS])
    d = run_diff(Source("a", a, ()), Source("b", b, ()), spec)
    moved = [c for c in d.changed if c.selection_changed]
    # a prefill-only move is a kernel move: it keys and titles the block (not "no backend change")
    assert [(c.a, c.b) for line in moved[0].backend for c in line.changes if c.field == "prefill_backend"] == \
        [("FLASH_ATTN v3+upstream", "FLASH_ATTN v3")]
    [block] = [b for b in d.blocks if b.kind == "selection"]
    assert block.title == "sliding_window: prefill backend FLASH_ATTN v3+upstream -> FLASH_ATTN v3"


def test_candidates_include_vllms_own_priority_of_each_group():
    """vLLM's SM90 multimodal priority rule reads a group fact (`group.draft: false`) and puts the TRITON_FLASH_ATTN
    composite first. The objective's candidates come from each target group's priority, as the resolver reads it; from
    the model-level facts alone the composite, vLLM's own choice there, was silently never a candidate."""
    from kselect.selector.measure.pins import priority_of
    from kselect.selector.rules.rulebook import rulebook

    mm = compose(["platform=sm90", "model=gemma4_e4b", "kv_cache=fp8", "model.multimodal=true"])
    text = compose(["platform=sm90", "model=gemma4_e4b", "kv_cache=fp8"])
    assert priority_of(mm, rulebook(mm))[0] == "TRITON_FLASH_ATTN"
    assert "TRITON_FLASH_ATTN" not in priority_of(text, rulebook(text))
    # and the objective scores it (the committed H200 figures): chosen or runner-up for the full-attention group
    sel = resolve(compose(["platform=sm90", "model=gemma4_e4b", "kv_cache=fp8", "model.multimodal=true",
                           "objective=latency"]))
    full = next(g for g in sel.groups if g.kind == "full_attention")
    scored = {x.backend for ev in full.measured for x in (ev.chosen, ev.runner_up, *ev.others) if x is not None}
    assert "TRITON_FLASH_ATTN v4" in scored


def test_explain_notes_the_host_time_faster_kernels_add_to_an_eager_step(fake_gpu):
    """In an eager prefill step each call also costs its host time (`host_ms`): where the fastest kernels cost more of
    it than vLLM's, the headroom record carries the difference and the text says so; a graphed step, or kernels that
    cost no more host time, carry none."""
    from kselect.selector.measure.explain import explain, to_text

    host = lambda x, ms: x.model_copy(update={"host_ms": ms})  # noqa: E731
    base = [host(x, 0.2) if x.phase == "prefill" else x for x in BUCKETS]  # sliding: FA4 both ways, same host time
    fast = [host(E("FLASH_ATTN_v4", 512, "prefill", 1.5), 0.1), host(E("FLASHINFER", 512, "prefill", 1.2), 0.4)]
    fake_gpu(buckets=[*base, *fast], steps=[step(420.0, 400.0)])
    d = explain(compose(_over(())), evidence())
    h = d["caches"]["bfloat16"]["prefill_headroom"]
    assert h["host_added_ms"] == pytest.approx(10 * (0.4 - 0.1)) and h["step_over_kernels"] == pytest.approx(1.05)
    assert "note: that step runs eager (wall 1.05x its kernels) and the fastest kernels' calls cost 3 ms more host " \
        "time" in to_text(d)
    fake_gpu(buckets=[*base, *fast], steps=[step(420.0, 400.0).model_copy(update={"graphs": True})])
    assert explain(compose(_over(())), evidence())["caches"]["bfloat16"]["prefill_headroom"]["host_added_ms"] is None
    cheap = [x.model_copy(update={"host_ms": 0.05}) if x.kernel == "FLASHINFER" else x for x in fast]
    fake_gpu(buckets=[*base, *cheap], steps=[step(420.0, 400.0)])
    d = explain(compose(_over(())), evidence())
    assert d["caches"]["bfloat16"]["prefill_headroom"]["host_added_ms"] is None and "note: that step" not in to_text(d)
