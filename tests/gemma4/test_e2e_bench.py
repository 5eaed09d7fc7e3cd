"""kselect.measurement.e2e (CPU smoke mode), kselect.measurement.plot_results (synthetic results), and the engine's
graph-decode bookkeeping (device-resident tokens, in-graph slots, graph reuse) emulated on CPU."""

from __future__ import annotations

import importlib
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from g4_helpers import simple_selection  # noqa: E402

# ---------------------------------------------------------------------------- e2e smoke
def test_e2e_smoke_writes_results(tmp_path):
    e2e = importlib.import_module("kselect.commands.e2e")
    out = tmp_path / "e2e"
    assert e2e.main(["--smoke", "--out", str(out), "--budget-s", "120"]) == 0
    d = json.loads((out / "e2e.json").read_text())
    md = (out / "e2e.md").read_text()
    env = d["environment"]
    assert "--smoke" in env["command"] and env["torch"] and "git_commit" in env
    p = d["presets"]["gemma4_tiny"]
    assert p["params_b"] > 0 and p["build_s"] >= 0 and p["hf_check"]["verdict"] == "ok"
    sels = d["selections"]
    assert {(s["selection"], s["kv"]) for s in sels} == {(a, b) for a in ("base", "pr48666", "pr53175")
                                                         for b in ("auto", "fp8")}
    for s in sels:
        assert s["groups"]["sliding_window"]["backend"] and s["groups"]["full_attention"]["backend"]
        n = s["numerics"]
        assert n["verdict"] == "ok" and n["max_rel_err"] <= n["tolerance"] and n["steps"] == 4
        # per-call check: on CPU every group runs the reference, which is reported as not compared
        assert [(c["group"], c["checked"], c["ok"]) for c in n["attention_calls"]] == [
            ("sliding_attention", False, True), ("full_attention", False, True)]
        assert s["capacity"]["tokens"] > 0
    cap = {s["kv"]: s["capacity"] for s in sels if s["selection"] == "base"}
    assert cap["fp8"]["bytes_per_token"] * 4 == cap["auto"]["bytes_per_token"]  # fp32 tiny model vs fp8
    assert any("fp8_quant_rel_err" in s["numerics"] for s in sels if s["kv"] == "fp8")
    runs = d["runs"]
    assert {r["batch"] for r in runs} == {1, 2}
    for r in runs:
        assert r["prefill_tok_s"] > 0 and r["decode_tok_s"] > 0 and r["decode_steps"] == 5, r
    assert {h["batch"] for h in d["hf"]} == {1, 2} and all(h["decode_tok_s"] > 0 for h in d["hf"])
    assert "| gemma4_tiny | base | auto | 1 |" in md and "HF transformers sdpa" in md
    # each run names the kernels the engine ran per group (the library build, where a backend has several)
    assert all(set(r["kernels"]) == {"sliding_window", "full_attention"} for r in runs)
    assert f"- gemma4_tiny base kv=auto: sliding_window: {runs[0]['kernels']['sliding_window']}" in md


def test_e2e_exits_1_naming_a_wrong_selection(tmp_path, monkeypatch, capsys):
    """A WRONG numerics verdict does not stop the measurements, but the run then exits 1 and names it."""
    e2e = importlib.import_module("kselect.measurement.e2e")
    real = e2e.numerics_check

    def wrong_for_fp8(model, groups, *a, **k):
        out = real(model, groups, *a, **k)
        if any(g.kv_cache_dtype.startswith("fp8") for g in groups.values()):
            out["verdict"] = e2e.WRONG
        return out

    monkeypatch.setattr("kselect.measurement.e2e.harness.numerics_check", wrong_for_fp8)
    out = tmp_path / "e2e"
    rc = importlib.import_module("kselect.commands.e2e").main(["--smoke", "--out", str(out), "--selections", "base", "--batches", "1", "--no-hf", "--budget-s", "120"])
    log = capsys.readouterr().out
    assert rc == 1
    assert "numerics: WRONG (an attention call above its bar, or non-finite) for: gemma4_tiny base kv=fp8;" in log
    d = json.loads((out / "e2e.json").read_text())
    assert {r["kv"] for r in d["runs"]} == {"auto", "fp8"}  # both still measured


def test_objective_table_compares_same_run_and_names_identical_selections():
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    sel = lambda name, kv, **kw: dict(preset="m", selection=name, kv=kv, **kw)  # noqa: E731
    run = lambda name, kv, b, dec, pre: dict(preset="m", selection=name, kv=kv, batch=b, decode_tok_s=dec,  # noqa: E731
                                             prefill_tok_s=pre)
    d = dict(selections=[sel("vllm", "auto"), sel("latency", "auto"), sel("pin_triton", "auto"),
                         sel("pin_fa", "auto", same_as="vllm kv=auto"), sel("pin_flashinfer", "auto", error="no kernel"),
                         sel("vllm", "fp8"), sel("latency", "fp8", same_as="vllm kv=fp8"), sel("pin_triton", "fp8")],
             runs=[run("vllm", "auto", 1, 50.0, 9000.0), run("latency", "auto", 1, 58.0, 9100.0),
                   run("pin_triton", "auto", 1, 57.0, 7000.0), run("vllm", "fp8", 1, 55.0, 8000.0),
                   run("pin_triton", "fp8", 1, 56.0, 8100.0)],
             prefills=[dict(preset="m", selection="vllm", kv="auto", prompt_len=4096, chunk=None, prefill_tok_s=8000.0),
                       dict(preset="m", selection="latency", kv="auto", prompt_len=4096, chunk=None, prefill_tok_s=7000.0),
                       dict(preset="m", selection="latency", kv="auto", prompt_len=4096, chunk=512, prefill_tok_s=9999.0)])
    t = {(r["kv"], r["metric"]): r for r in e2e.objective_table(d)}
    dec = t[("auto", "decode B1")]
    assert dec["best_pin"] == "pin_triton" and dec["vs_vllm"] == pytest.approx(58 / 50)  # pin_fa is vllm's run
    assert dec["verdict"] == "faster than vllm; >= best pin (pin_triton)"
    # chunked runs are not the whole prefill; pin_fa ran as vllm (same_as) and is the best pin here
    assert t[("auto", "prefill B1 x 4096")]["verdict"] == "SLOWER than vllm; SLOWER than pin_fa"
    assert t[("auto", "prefill B1 x prompt-len")]["verdict"] == "within noise of vllm; >= best pin (pin_fa)"
    # an objective that resolved to vLLM's own groups claims no gain, even where a pin is faster
    assert t[("fp8", "decode B1")]["verdict"] == "same kernels as vllm (no gain claimed)"
    md = e2e.render_md(dict(
        d, environment=dict(command="x", git_commit="abc", torch="t", date="d"), hf=[], presets={}, skipped=[], errors=[],
        ceilings={}, options=dict(prompt_len=1, new=1, hf_new=1, reps=1, capacity_gib=1),
        prefill_profiles=[dict(preset="m", selection="vllm", kv="auto", point="", prompt_len=512, mode="graph",
                               attention_ms=1.5, kernel_ms=9.25, kernels=700)]))
    assert "## Objectives vs objective=vllm" in md
    assert "## B1 prefill profile" in md and "| m | vllm | auto | 512 | graph | 1.500 | 9.25 | 700 |" in md


def test_the_rounds_section_shows_each_selections_spread_and_slow_rounds():
    rep = importlib.import_module("kselect.measurement.e2e_report")
    ms = [64.0, 64.5, 63.8, 64.2, 72.0, 64.1, 64.3, 80.0, 63.9, 64.0]  # median 64.15: two rounds >= 1.05x
    sp = rep.round_spread(ms)
    assert sp["rounds"] == 10 and sp["median"] == pytest.approx(64.15) and sp["slow"] == 2
    assert sp["min"] == 63.8 and sp["max"] == 80.0 and 72.0 <= sp["p95"] <= 80.0
    assert rep.round_spread([64.0]) is None
    md = rep.render_md(dict(
        environment=dict(command="x", git_commit="abc", torch="t", date="d"), hf=[], presets={}, skipped=[], errors=[],
        ceilings={}, options=dict(prompt_len=1, new=1, hf_new=1, reps=1, capacity_gib=1), selections=[], runs=[],
        prefills=[], profiles=[], prefill_profiles=[],
        prefill_rounds=[dict(preset="m", selection="vllm", kv="auto", metric="prefill B1 x 4096", prefill_ms_reps=ms),
                        dict(preset="m", selection="latency", kv="auto", metric="prefill B1 x 4096",
                             prefill_ms_reps=[63.0, 63.1])]))
    assert "## Interleaved prefill rounds" in md
    assert f"| m | auto | prefill B1 x 4096 | vllm | 10 | 64.15 | 63.80 | {sp['p95']:.2f} | 80.00 | " in md
    assert "| m | auto | prefill B1 x 4096 | latency | 2 | 63.05 | 63.00 |" in md and md.count("| prefill B1 x 4096 |") == 2


def test_e2e_capacity_counts_only_kv_producing_layers():
    e2e = importlib.import_module("kselect.measurement.e2e")
    from kselect.gemma4.config import Gemma4Args
    from kselect.gemma4.engine import model_groups
    from kselect.selector.api import compose

    cfg = compose(["platform=cpu", "model=gemma4_e4b"])
    args = Gemma4Args.from_model_config(cfg.model.model_dump())
    sel = simple_selection(args, kv_block_size=16)
    cap = e2e.capacity(args, model_groups(sel), torch.bfloat16, 40.0)
    # E4B: 24 non-shared layers (20 sliding, 4 full), 2 kv heads, head 256 / 512, bf16
    assert cap["groups"]["sliding_window"]["producer_layers"] == 20
    assert cap["groups"]["full_attention"]["producer_layers"] == 4
    assert cap["bytes_per_token"] == 20 * 2 * 2 * 256 * 2 + 4 * 2 * 2 * 512 * 2
    assert cap["tokens"] % 16 == 0 and cap["tokens"] * cap["bytes_per_token"] <= 40 * 2**30
    # one sequence, prompts in chunks of 2048: the sliding pool is fixed at (window 512 - 1 + 2048) tokens
    # in whole blocks (+1 straddling, +1 null); the full pool grows with the sequence (+1 partial block)
    sliding, full = 20 * 2 * 2 * 256 * 2, 4 * 2 * 2 * 512 * 2
    fixed = (math.ceil((512 - 1 + 2048) / 16) + 2) * 16 * sliding + 16 * full
    want = (40 * 2**30 - fixed) // (16 * full) * 16
    assert cap["one_sequence_windowed"] == dict(prefill_chunk=2048, tokens=want) and want > 3 * cap["tokens"]


# ---------------------------------------------------------------------------- plots
def _synthetic(results: Path) -> None:
    (results / "h200" / "kern").mkdir(parents=True)
    rows = [
        dict(kind="decode", shape="31b_sliding", b=16, L=32768, path="fa3_bf16", status="ok", ms=0.2, gbs=2500.0,
             ms_graph=0.15, gbs_graph=3000.0, pct_copy=71.0, rel_err=1e-3),
        dict(kind="decode", shape="31b_sliding", b=16, L=32768, path="triton_fp8", status="ok", ms=0.3, gbs=900.0,
             rel_err=2e-2),
        dict(kind="decode", shape="31b_sliding", b=16, L=32768, path="fa4_bf16", status="FAIL", note="boom"),
        dict(kind="prefill", shape="31b_full", b=1, L=8192, path="fa4fork_bf16", status="ok", ms=5.0, tflops=350.0),
        dict(kind="decode", shape="e4b_full", b=1, L=131072, path="fa4fork_fp8kv", status="ok", ms=0.1,
             gbs=1800.0, ms_graph=0.09, gbs_graph=2000.0),
    ]
    meta = dict(gpu="NVIDIA H200", torch="2.11", page=64, copy_gbs=4230.0, bf16_gemm_tflops=750.0)
    (results / "h200" / "kern" / "bench.json").write_text(json.dumps(dict(meta=meta, rows=rows)))
    (results / "h200" / "e2e").mkdir()
    e2e = dict(environment=dict(gpu="NVIDIA H200", git_commit="abc123"), ceilings=dict(copy_gbs=4230.0),
               presets={"gemma4_31b": dict(decode_read_gb=61.4)},
               selections=[dict(preset="gemma4_31b", selection="pr48666", kv="fp8", numerics=dict(verdict="WRONG"))],
               runs=[dict(preset="gemma4_31b", selection="pr48666", kv="fp8", batch=1, prompt_len=512,
                          prefill_tok_s=9000.0, decode_tok_s=50.0)],
               hf=[dict(preset="gemma4_31b", batch=1, prompt_len=512, prefill_tok_s=4500.0, decode_tok_s=7.6)])
    (results / "h200" / "e2e" / "e2e.json").write_text(json.dumps(e2e))
    (results / "broken").mkdir()
    (results / "broken" / "bench.json").write_text("{not json")


def test_plot_results_on_synthetic_files(tmp_path):
    plot = importlib.import_module("kselect.measurement.plot_results")
    results = tmp_path / "results"
    _synthetic(results)
    out = tmp_path / "plots"
    assert plot.main(["--results", str(results), "--out", str(out)]) == 0
    md = (out / "performance.md").read_text()
    assert "| decode | 31b_sliding | 16 | 32768 | fa3_bf16 |" in md  # fastest ok path wins
    assert "fa4_bf16" in md  # listed as failed
    assert "| prefill | 31b_full | 1 | 8192 | fa4fork_bf16 |" in md
    assert "| gemma4_31b | pr48666 | fp8 | 1 |" in md and "**WRONG**" in md and "6.6x" in md
    assert "broken" in md and "skipped" in md
    pytest.importorskip("matplotlib")
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert any(n.startswith("roofline_31b_sliding") for n in pngs)
    assert any(n.startswith("roofline_e2e") for n in pngs)
    assert all((out / n).stat().st_size > 1000 for n in pngs)


def test_plot_results_without_results(tmp_path):
    plot = importlib.import_module("kselect.measurement.plot_results")
    assert plot.main(["--results", str(tmp_path / "missing"), "--out", str(tmp_path / "p")]) == 0
    assert "No results found" in (tmp_path / "p" / "performance.md").read_text()


def test_plot_results_never_writes_over_earlier_plots(tmp_path):
    """#51: the documented command rewrote the committed performance.md and added PNGs beside it."""
    plot = importlib.import_module("kselect.measurement.plot_results")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "performance.md").write_text("committed")
    with pytest.raises(Exception, match="holds files already"):
        plot.main(["--results", str(tmp_path / "missing"), "--out", str(tmp_path / "p")])
    assert (tmp_path / "p" / "performance.md").read_text() == "committed"
    with pytest.raises(SystemExit):  # --out is required: no default into the committed results
        plot.main(["--results", str(tmp_path / "missing")])


def test_decode_intensity_is_gqa_ratio():
    plot = importlib.import_module("kselect.measurement.plot_results")
    row = dict(kind="decode", shape="31b_sliding", b=4, L=4096, path="fa3_bf16")
    assert plot.intensity(row) == pytest.approx(2.0)  # 2 * (32/16) / 2 bytes
    assert plot.intensity(dict(row, path="triton_fp8")) == pytest.approx(4.0)


# ---------------------------------------------------------------------------- graph decode, emulated
# (the fake_cuda_graphs fixture is in conftest.py)


@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_graph_decode_on_device_matches_eager(models, prompts, fake_cuda_graphs, kv):
    model, _ = models["edge"]
    sel = simple_selection(model.args, kv_block_size={"sliding_attention": 8, "full_attention": 16}, kv_cache_dtype=kv)
    eager = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    g = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    g.use_graphs = True  # the fake graph path on CPU
    want = eager.generate(prompts, 20, return_logits=True, stop_at_eos=False)
    for _ in range(2):  # the second run reuses the captured graph after reset()
        got = g.generate(prompts, 20, return_logits=True, stop_at_eos=False)
        assert got.cuda_graphs and not got.notes and len(g.decode_graphs.graphs) == 1
        assert got.tokens == want.tokens and got.steps == want.steps
        assert got.decode_tokens == want.decode_tokens
        assert max_rel_error(torch.stack(got.logits), torch.stack(want.logits)) < 1e-5
    # EOS: stop early as the host loop does (checked every EOS_CHECK_EVERY steps, same tokens)
    eos = want.tokens[1][3]
    a = eager.generate(prompts, 20, eos_token_id=eos)
    b = g.generate(prompts, 20, eos_token_id=eos)
    assert a.tokens == b.tokens and a.steps == b.steps
    # teacher forcing (the numerics replay) and the host-list decode() API on the same graph
    forced = [list(c) for c in zip(*want.steps)]
    f = g.generate(prompts, len(want.steps), forced=forced, return_logits=True, stop_at_eos=False)
    assert f.steps == want.steps
    g.reset()
    e2 = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    seqs = [0, 1, 2]
    l1, l2 = g.extend(seqs, prompts), e2.extend(seqs, prompts)
    for step in range(5):
        toks = l2.argmax(-1).tolist()
        l1, l2 = g.decode(seqs, toks), e2.decode(seqs, toks)
        assert max_rel_error(l1, l2) < 1e-5
    assert g.use_graphs and not g.notes


def test_graph_decode_advances_positions_inside_the_graph(models, prompts, fake_cuda_graphs):
    """Between two replays of a decode graph only the ids change from outside: the graph itself leaves the next step's
    positions and lengths (+1) on the device, so `advance` launches no kernel for them; the warm-ups before capture
    each run the same step (CapturedStep._rewind)."""
    model, _ = models["edge"]
    g = Engine(model, simple_selection(model.args), EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    g.use_graphs = True
    g.generate(prompts, 4, stop_at_eos=False)
    dg = g.decode_graphs.graphs[len(prompts)]
    pos, used = dg.pos.clone(), {k: m.seqused_k.clone() for k, m in dg.metas.items()}
    dg.replay = lambda: dg.out  # a replay that runs nothing: what advance itself does shows
    with torch.inference_mode():  # as the engine's steps run
        dg.advance(torch.tensor([5] * len(prompts)))
        assert torch.equal(dg.pos, pos) and all(torch.equal(m.seqused_k, used[k]) for k, m in dg.metas.items())
        assert dg.ids.tolist() == [5] * len(prompts)
        del dg.replay
        dg.replay()  # the (emulated) graph: one step, then positions and lengths +1
    assert torch.equal(dg.pos, pos + 1) and all(torch.equal(m.seqused_k, used[k] + 1) for k, m in dg.metas.items())


def test_graph_decode_with_kernel_blocks_reads_each_steps_table(models, prompts, fake_cuda_graphs):
    """Kernel blocks of 4 inside kv blocks of 8 / 16: a step expands its group's table once
    (AttentionMetadata.kernel_tables) and no replay reads the table of an earlier step."""
    model, _ = models["edge"]
    sel = simple_selection(model.args, kv_block_size={"sliding_attention": 8, "full_attention": 16}, kernel_block_size=4)
    eager = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    g = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64, cuda_graphs=False))
    g.use_graphs = True
    want = eager.generate(prompts, 20, return_logits=True, stop_at_eos=False)
    got = g.generate(prompts, 20, return_logits=True, stop_at_eos=False)
    assert got.cuda_graphs and not got.notes and got.tokens == want.tokens
    assert max_rel_error(torch.stack(got.logits), torch.stack(want.logits)) < 1e-5


def test_init_weights_inplace_is_seeded_in_the_model_dtype():
    from kselect.gemma4.checkpoint import init_weights_inplace
    from kselect.gemma4.config import Gemma4Args
    from kselect.gemma4.model import Gemma4

    from g4_helpers import make_args

    args: Gemma4Args = make_args("all")
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        a, b = Gemma4(args), Gemma4(args)
    finally:
        torch.set_default_dtype(prev)
    init_weights_inplace(a, seed=3).keep_rope_fp32()
    init_weights_inplace(b, seed=3)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.embed_tokens.weight.dtype == torch.bfloat16 and a.full_inv_freq.dtype == torch.float32
    w = a.layers[0].self_attn.q_proj.weight.float()
    assert abs(w.std().item() * args.hidden_size**0.5 - 1) < 0.05
    assert abs(a.layers[0].input_layernorm.weight.float().mean().item() - 1) < 0.05


def test_objective_table_reads_each_metric_at_the_objectives_own_point():
    """--objective-at-run: `latency` is resolved per run (decode B1, decode B16, prefill 4096); each
    metric is read from the resolution at its own point, and a point whose groups equal vLLM's claims
    no gain while the others are compared."""
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    sel = lambda name, point="", **kw: dict(preset="m", selection=name, kv="auto", point=point, **kw)  # noqa: E731
    run = lambda name, b, dec, point="": dict(preset="m", selection=name, kv="auto", batch=b, point=point,  # noqa: E731
                                              decode_tok_s=dec, prefill_tok_s=1000.0)
    d = dict(selections=[sel("vllm"), sel("pin_triton"), sel("latency", "decode B1"),
                         sel("latency", "decode B16", same_as="vllm kv=auto", same_as_point=""),
                         sel("latency", "prefill 4096")],
             runs=[run("vllm", 1, 50.0), run("vllm", 16, 800.0), run("pin_triton", 1, 52.0), run("pin_triton", 16, 700.0),
                   run("latency", 1, 58.0, "decode B1")],
             prefills=[dict(preset="m", selection="vllm", kv="auto", prompt_len=4096, chunk=None, prefill_tok_s=8000.0),
                       dict(preset="m", selection="latency", kv="auto", prompt_len=4096, chunk=None, prefill_tok_s=8500.0,
                            point="prefill 4096")])
    t = {r["metric"]: r for r in e2e.objective_table(d)}
    assert t["decode B1"]["value"] == 58.0 and t["decode B1"]["point"] == "decode B1"
    assert t["decode B1"]["verdict"] == "faster than vllm; >= best pin (pin_triton)"
    assert t["decode B16"]["value"] == 800.0 and t["decode B16"]["verdict"] == "same kernels as vllm (no gain claimed)"
    assert t["prefill B1 x 4096"]["value"] == 8500.0 and t["prefill B1 x 4096"]["vs_vllm"] == pytest.approx(8500 / 8000)
    assert t["prefill B1 x prompt-len"]["value"] == 1000.0  # the B1 run's prefill, resolved at decode B1


def test_request_metric_weighs_a_slower_prefill_against_faster_decode_steps():
    """objective=latency at decode B1 minimizes the request (prefill + decode steps): a run whose prefill
    is slower but whose 63 decode steps are faster serves the request faster, and the table says so."""
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    run = lambda name, pre_ms, step_ms, point="": dict(  # noqa: E731
        preset="m", selection=name, kv="auto", batch=1, point=point, prefill_tok_s=512 / pre_ms * 1e3, prefill_ms=pre_ms,
        decode_ms_per_step=step_ms, decode_steps=63, decode_tok_s=1e3 / step_ms)
    d = dict(selections=[dict(preset="m", selection="vllm", kv="auto"), dict(preset="m", selection="latency", kv="auto",
                                                                            point="decode B1")],
             runs=[run("vllm", 10.5, 5.18), run("latency", 12.2, 5.04, "decode B1")], prefills=[])
    t = {r["metric"]: r for r in e2e.objective_table(d)}
    assert t["prefill B1 x prompt-len"]["verdict"].startswith("SLOWER than vllm")
    req = t[e2e.REQUEST]
    assert req["value"] == pytest.approx((512 + 63) / (12.2 + 63 * 5.04) * 1e3)
    assert req["vs_vllm"] == pytest.approx((10.5 + 63 * 5.18) / (12.2 + 63 * 5.04)) and req["vs_vllm"] > 1
    assert req["verdict"] == "faster than vllm"
    assert e2e.request_tok_s(dict(prefill_tok_s=1.0)) is None  # older records without the fields


def test_explain_vs_run_compares_prefill_attention():
    """kselect/measurement/explain_vs_e2e.py sets explain's prefill step (layers x conf/perf ms) beside the profiled
    prefill of the run (e2e.py prefill_profiles): like for like against the kernels plus launch gaps, and
    only where the run's prefill kernels are explain's; otherwise it says so."""
    from kselect.selector.api import compose
    from kselect.selector.api import bundled_evidence
    from kselect.selector.measure.explain import explain, step

    xv = importlib.import_module("kselect.measurement.explain_vs_e2e")
    model, prompt = "gemma4_31b", 512
    cfg = compose(["platform=sm90", f"model={model}", "objective=latency", "objective.decode.context=544",
                   f"objective.prefill.context={prompt}"])
    caches = list(explain(cfg, bundled_evidence())["caches"].values())
    rows16 = caches[0]["rows"]
    want = step(rows16, "prefill", "vllm")
    ran = {r["group"]: {"backend": "TRITON_ATTN", "prefill_backend": r["vllm"]["backend"]}
           for r in rows16 if r["phase"] == "prefill"}  # decodes elsewhere, prefills on explain's kernels
    e2e = dict(selections=[dict(preset=model, selection="vllm", kv="auto", groups=ran),
                           dict(preset=model, selection="latency", kv="auto",
                                groups={k: {"backend": "TORCH_REFERENCE"} for k in ran})],
               prefill_profiles=[dict(preset=model, selection="vllm", kv="auto", attention_ms=want * 0.8,
                                      attention_timeline_ms=want * 1.25, mode="graph", prompt_len=prompt),
                                 dict(preset=model, selection="latency", kv="auto", attention_ms=1.0, mode="graph")])
    rows, lines = xv.prefill_rows(e2e, model, caches, prompt)
    v = next(r for r in rows if r["selection"] == "vllm")
    assert v["same_kernels"] and v["diff"] == pytest.approx(1 / 1.25 - 1)
    lat = next(r for r in rows if r["selection"] == "latency")
    assert not lat["same_kernels"] and "diff" not in lat
    assert any("| -20.0% |" in line for line in lines) and any("| other kernels |" in line for line in lines)
    assert xv.prefill_rows(dict(e2e, prefill_profiles=[]), model, caches, prompt) == ([], [])


def test_hf_timing_keeps_no_autograd_graph():
    """HF's parameters require grad: a timed or warm-up call outside inference mode would keep every layer's
    activations for a backward (31B's 4,096-token prefill ran out of memory so)."""
    e2e = importlib.import_module("kselect.measurement.e2e")
    w = torch.nn.Parameter(torch.ones(4, 4))
    seen = []

    class FakeHF:
        def __call__(self, input_ids, attention_mask, logits_to_keep):
            out = input_ids.float()[..., None] * w[0]
            seen.append(out.requires_grad)
            return out

        def generate(self, ids, **kw):
            return self(ids, None, 1)

    hf = FakeHF()
    e2e.time_hf_prefill(hf, 8, 100, 2, torch.device("cpu"), 0)
    e2e.time_hf(hf, [[5, 6, 7]], 4, 2, torch.device("cpu"))
    assert seen and not any(seen)


def test_hf_is_timed_on_torchs_own_threads_not_the_engines(monkeypatch, tmp_path):
    """An engine on a GPU shrinks torch's pool to one thread for the whole process (gemma4/host_threads.py); HF's
    baseline is timed on the count torch had before, and the engines' count comes back after."""
    e2e = importlib.import_module("kselect.measurement.e2e")
    monkeypatch.setattr("kselect.measurement.e2e.hf.HF_THREADS", 2)
    seen = []

    class FakeHF:
        def __call__(self, input_ids, attention_mask, logits_to_keep):
            seen.append(torch.get_num_threads())
            return input_ids.float()[..., None]

        def generate(self, ids, **kw):
            return self(ids, None, 1)

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as an engine on a GPU leaves it
        e2e.time_hf_prefill(FakeHF(), 8, 100, 2, torch.device("cpu"), 0)
        e2e.time_hf(FakeHF(), [[5, 6, 7]], 4, 2, torch.device("cpu"))
        assert seen and set(seen) == {2}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    report = importlib.import_module("kselect.measurement.e2e_report")
    env = dict(command="e2e.py", git_commit="abc", torch="2", date="d", host_threads=1, hf_threads=16)
    rep = report.Report(tmp_path, env, dict(prompt_len=8, new=2, hf_new=2, reps=1, capacity_gib=1))
    text = report.render_md(rep.data)
    assert "Intra-op CPU threads: the engines 1 (gemma4/host_threads.py), HF 16." in text


def test_profiles_name_each_attention_kernel():
    """step_profile.attention_kernels (the e2e profiles' and bucket_vs_step's table): attention kernels only, by
    name, launches per step and mean microseconds, the heaviest first."""
    from types import SimpleNamespace

    step_profile = importlib.import_module("kselect.measurement.step_profile")
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def ev(name, a, b, dev=cuda):
        return SimpleNamespace(name=name, device_type=dev, time_range=SimpleNamespace(start=a, end=b))

    events = [ev("flash_fwd_sm90", 0, 11), ev("void flash::prepare_varlen_num_blocks_kernel<1, false>", 11, 13), ev("nvjet_gemv", 13, 40),
              ev("flash_fwd_sm90", 40, 53), ev("_merge_splits", 53, 54), ev("flash_fwd_sm90", 0, 99, cpu)]
    ks = step_profile.attention_kernels(events, 2)
    assert list(ks) == ["flash_fwd_sm90", "void flash::prepare_varlen_num_blocks_kernel<1, false>", "_merge_splits"]
    assert ks["flash_fwd_sm90"] == dict(launches=1.0, mean_us=12.0) and ks["_merge_splits"]["launches"] == 0.5


def test_explain_vs_run_lists_the_runs_attention_kernels():
    xv = importlib.import_module("kselect.measurement.explain_vs_e2e")
    ks = {"flash_fwd": dict(launches=50.0, mean_us=11.0), "_quant_query_kernel": dict(launches=50.0, mean_us=1.5)}
    e2e = dict(profiles=[dict(preset="m", selection="vllm", kv="fp8", attention_kernels=ks),
                         dict(preset="m", selection="latency", kv="fp8")],  # recorded before the field: left out
               prefill_profiles=[dict(preset="m", selection="vllm", kv="fp8", prompt_len=512, attention_kernels=ks),
                                 dict(preset="other", selection="vllm", kv="fp8", attention_kernels=ks)])
    lines = xv.kernel_lines(e2e, "m")
    rows = [line for line in lines if line.startswith("| decode step") or line.startswith("| prefill")]
    assert len(rows) == 4 and "| decode step | fp8 | vllm | `flash_fwd` | 50 | 11.00 | 550.0 |" in rows
    assert any(r.startswith("| prefill of 512 | fp8 | vllm | `_quant_query_kernel` | 50 | 1.50 | 75.0 |") for r in rows)
    assert xv.kernel_lines(dict(profiles=[dict(preset="m", selection="vllm", kv="fp8")]), "m") == []


def test_bucket_vs_step_prefill_profiles_each_engine_bound_beside_each_groups_bucket(tmp_path):
    """kselect.measurement.gemma4.bucket_vs_step --phase prefill (CPU smoke): one engine prefill per --max-seq-lens, each
    group's prefill bucket at the prompt's length, json and markdown that say which is which."""
    bvs = importlib.import_module("kselect.measurement.gemma4.bucket_vs_step")
    out = tmp_path / "bvs"
    assert bvs.main(["--out", str(out), "--preset", "gemma4_tiny", "--platform", "cpu", "--kv", "auto",
                     "--selections", "vllm", "--phase", "prefill", "--prompt-len", "20", "--steps", "1",
                     "--max-seq-lens", "28", "60"]) == 0
    (row,) = json.loads((out / "bucket_vs_step.json").read_text())
    assert row["phase"] == "prefill" and row["context"] == 20 and set(row["steps"]) == {"28", "60"}
    assert {g["kind"] for g in row["groups"]} == {"sliding_window", "full_attention"}
    for g in row["groups"]:
        assert g["layers"] > 0 and [b["fence"] for b in g["buckets"]] == ["none"] and g["buckets"][0]["ms"] > 0
    md = (out / "bucket_vs_step.md").read_text()
    assert "B1 prefill" in md and "model prefill (engine max_seq_len 60)" in md and "bucket, fence none" in md


def test_prefill_rounds_visit_every_selection_each_round_in_balanced_orders(monkeypatch):
    """kselect/measurement/prefill_rounds.py: engines built and warmed first, then each round visits every engine in the
    next of balanced_orders' orders; a visit times its prefill after `warm` untimed ones; the record is the median."""
    pr = importlib.import_module("kselect.measurement.prefill_rounds")
    calls, secs = [], {"a": [0.010, 0.030, 0.020], "b": [0.005, 0.004, 0.006], "c": [0.1, 0.1, 0.1]}

    class FakeEngine:
        prefill_graph_steps = 0

        def __init__(self, model, groups, config=None, **kw):
            self.key, self.n = groups, 0

        def generate(self, prompts, new, stop_at_eos):
            calls.append(self.key)
            self.n += 1
            if self.n == 1 or self.n % 2 == 0:  # the engine's warm-up, then each visit's untimed prefill
                return SimpleNamespace(prefill_s=9.0)
            return SimpleNamespace(prefill_s=secs[self.key][self.n // 2 - 1])

    monkeypatch.setattr(pr, "Engine", FakeEngine)
    got = pr.interleaved_prefill(None, {"A": "a", "B": "b", "C": "c"}, list(range(100)), 3, None)
    assert calls == ["a", "b", "c"] + ["a", "a", "b", "b", "c", "c"] + ["b", "b", "c", "c", "a", "a"] \
        + ["c", "c", "a", "a", "b", "b"]  # balanced_orders(3)[:3]; orders 3-5 are their reverses
    assert got["A"]["prefill_ms"] == pytest.approx(20.0) and got["A"]["prefill_ms_reps"] == [10.0, 30.0, 20.0]
    assert got["B"]["prefill_tok_s"] == pytest.approx(100 / 0.005) and got["C"]["rounds"] == 3
    assert got["C"]["warm"] == 1 and got["C"]["order"] == "williams"
    calls.clear()
    pr.interleaved_prefill(None, {"A": "a", "B": "b"}, [1], 1, None, warm=0)
    assert calls == ["a", "b", "a", "b"]
    with pytest.raises(ValueError, match="at least 1"):
        pr.interleaved_prefill(None, {"A": "a"}, [1], 0, None)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_balanced_orders_let_each_selection_follow_each_other_equally_often(n):
    """A plain rotation of three selections keeps a -> b -> c -> a: each always follows the same one. The Williams
    orders are permutations in which every ordered pair (i, j), i != j, is adjacent equally often."""
    from collections import Counter

    pr = importlib.import_module("kselect.measurement.prefill_rounds")
    orders = pr.balanced_orders(n)
    assert len(orders) == (2 * n if n % 2 and n > 1 else n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    pairs = Counter((a, b) for o in orders for a, b in zip(o, o[1:]))
    if n > 1:
        assert set(pairs) == {(i, j) for i in range(n) for j in range(n) if i != j}
        assert len(set(pairs.values())) == 1
    with pytest.raises(ValueError, match="at least one"):
        pr.balanced_orders(0)
    if n == 2:  # the visits of three rounds: each round in the next order
        assert list(pr.visit_order(["a", "b"], 3)) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]


def test_selection_overrides_put_the_run_rules_in_place_of_the_seed_rules_only():
    e2e = importlib.import_module("kselect.measurement.e2e")
    assert e2e.selection_overrides("vllm", "vllm_0_33_0") == ["rules=vllm_0_33_0"]
    assert e2e.selection_overrides("latency", "x") == ["rules=x", "objective=latency"]
    assert e2e.selection_overrides("vllm_0_33_0", "post_pr52987") == ["rules=vllm_0_33_0"]  # names its own rules


def test_objective_table_reads_interleaved_prefills_and_never_mixes_them_with_block_timings():
    """A prefill metric timed in rounds (--prefill-rounds) is read from the rounds for every selection, marked
    interleaved; a selection the rounds lack gets no value, not its block timing; other metrics are unchanged."""
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    sel = lambda name, point="": dict(preset="m", selection=name, kv="auto", point=point)  # noqa: E731
    run = lambda name, pre, point="": dict(preset="m", selection=name, kv="auto", batch=1, point=point,  # noqa: E731
                                           decode_tok_s=50.0, prefill_tok_s=pre)
    rnd = lambda name, pre, point="": dict(preset="m", selection=name, kv="auto", point=point,  # noqa: E731
                                           metric="prefill B1 x prompt-len", prompt_len=512, prefill_tok_s=pre)
    d = dict(selections=[sel("vllm"), sel("pin_fa3"), sel("pin_triton"), sel("latency", "decode B1")],
             runs=[run("vllm", 10_481.0), run("pin_fa3", 10_375.0), run("pin_triton", 9_000.0),
                   run("latency", 10_348.0, "decode B1")],
             prefills=[], prefill_rounds=[rnd("vllm", 10_400.0), rnd("pin_fa3", 10_300.0),
                                          rnd("latency", 10_450.0, "decode B1")])
    t = {r["metric"]: r for r in e2e.objective_table(d)}
    p = t["prefill B1 x prompt-len"]
    assert p["interleaved"] and p["value"] == 10_450.0 and p["vllm"] == 10_400.0
    assert p["best_pin"] == "pin_fa3" and p["best_pin_value"] == 10_300.0  # pin_triton: not in the rounds, no value
    assert p["verdict"] == "within noise of vllm; >= best pin (pin_fa3)"
    assert not t["decode B1"]["interleaved"] and t["decode B1"]["value"] == 50.0
    assert p["graphs"] == ""  # no record says its prefills replayed graphs
    # rounds on prefill graphs say so; one selection that fell back to eager is named, not hidden
    for x in d["prefill_rounds"]:
        x["prefill_graph_steps"] = 3
    assert {r["metric"]: r for r in e2e.objective_table(d)}["prefill B1 x prompt-len"]["graphs"] == "graphs"
    d["prefill_rounds"][1]["prefill_graph_steps"] = 0
    p = {r["metric"]: r for r in e2e.objective_table(d)}["prefill B1 x prompt-len"]
    assert p["graphs"] == "graphs in 2 of 3 selections"
    assert e2e._mode(p) == " (interleaved, graphs in 2 of 3 selections)"


def test_prefill_rounds_time_what_the_table_reads_at_each_point(monkeypatch):
    """e2e.rounds: per KV dtype and prefill metric, the selections resolved at that metric's point (an objective's
    own row there, a twin's measured row instead of the twin) go into one set of interleaved rounds, and each result
    is recorded under its row's selection and point."""
    from kselect.measurement.e2e.state import Preset, Run

    e2e = importlib.import_module("kselect.measurement.e2e")
    sel = lambda name, point="", **kw: dict(preset="m", selection=name, kv="auto", point=point, **kw)  # noqa: E731
    selections = [sel("vllm"), sel("pin_fa", same_as="vllm kv=auto"), sel("pin_triton"),
                  sel("latency", "decode B1"), sel("latency", "prefill 4096"), sel("pin_flashinfer", error="no kernel")]
    todo = [(s, f"groups:{s['selection']}@{s['point']}") for s in selections if "same_as" not in s and "error" not in s]
    calls = []

    def fake(model, entries, prompt, rounds, graphs, prefill_graph_tokens):
        calls.append((len(prompt), sorted(entries.values()), graphs, prefill_graph_tokens))
        return {k: dict(prefill_tok_s=1000.0 + k, prefill_ms=1.0) for k in entries}

    monkeypatch.setattr("kselect.measurement.prefill_rounds.interleaved_prefill", fake)
    for graph_tokens, long_graphs in ((2048, False), (4096, None)):  # --prefill-graph-tokens admits 4,096 or not
        calls.clear()
        rep = SimpleNamespace(data=dict(selections=selections, prefill_rounds=[], skipped=[], errors=[]), save=lambda: None)
        opts = SimpleNamespace(prefill_rounds=3, prompt_len=12, prefill_lens=[4096], kv=["auto"],
                               prefill_graph_tokens=graph_tokens, budget_s=1e9)
        model = SimpleNamespace(args=SimpleNamespace(vocab_size=100))
        preset = Preset("m", model, {}, [1], torch.Generator().manual_seed(0), [], [], todo)
        e2e.rounds(Run(opts, rep, time.perf_counter(), None), preset)
        assert calls == [(12, ["groups:latency@decode B1", "groups:pin_triton@", "groups:vllm@"], None, graph_tokens),
                         (4096, ["groups:latency@prefill 4096", "groups:pin_triton@", "groups:vllm@"], long_graphs,
                          graph_tokens)]
        got = {(r["metric"], r["selection"], r["point"]) for r in rep.data["prefill_rounds"]}
        assert got == {("prefill B1 x prompt-len", "vllm", ""), ("prefill B1 x prompt-len", "pin_triton", ""),
                       ("prefill B1 x prompt-len", "latency", "decode B1"), ("prefill B1 x 4096", "vllm", ""),
                       ("prefill B1 x 4096", "pin_triton", ""), ("prefill B1 x 4096", "latency", "prefill 4096")}


def test_e2e_refuses_prefill_graph_tokens_that_are_no_bucket(tmp_path, capsys):
    e2e = importlib.import_module("kselect.commands.e2e")
    with pytest.raises(SystemExit) as ex:
        e2e.main(["--smoke", "--out", str(tmp_path / "r"), "--prefill-graph-tokens", "3000"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "--prefill-graph-tokens: prefill graph tokens 3000: not a bucket; allowed:" in err and "4096" in err
    assert not (tmp_path / "r").exists()


def test_gemv_variants_name_valid_configs_for_the_shapes_they_change():
    """kselect/measurement/gemv_variants.py: every variant changes only E4B's shapes it names, with launch parameters
    kernels/gemv accepts (powers of two, the first chunk covering what the docstring says)."""
    gv = importlib.import_module("kselect.measurement.gemv_variants")
    from kselect.kernels import gemv

    e4b = {"qkv": (3072, 2560), "o": (2560, 2048), "gate_up": (20480, 2560), "down": (2560, 10240),
           "ple_gate": (256, 2560), "ple_proj": (2560, 256), "lm_head": (262144, 2560)}
    changed = {}
    for name, fn in gv.GEMV.items():
        with gemv.configured(fn):
            for proj, (n, k) in e4b.items():
                cfg = gemv.config(n, k)
                assert all(v > 0 and not v & (v - 1) for key, v in cfg.items() if key not in ("num_warps", "ahead")), \
                    (name, proj)
                assert cfg["ahead"] in (0, 1), (name, proj)
                if fn(n, k):
                    changed.setdefault(name, set()).add(proj)
    assert changed["small_whole_k"] == changed["small_first_2048"] == {"qkv", "o", "ple_gate"}
    assert changed["wide_first_1024"] == {"gate_up", "lm_head"} and changed["down_first_4096"] == {"down"}
    assert changed["combined"] == {"qkv", "o", "ple_gate", "gate_up", "lm_head", "down"}
    assert changed["ahead_all"] == set(e4b)
    with gemv.configured(gv.small_whole_k):
        assert gemv.config(3072, 2560)["first_k"] == 4096 and gemv.config(2560, 2048)["first_k"] == 2048
    assert changed["chunks_2x"] == changed["rows_2x"] == changed["first_64"] == set(e4b)
    assert changed["first_256"] == {"qkv", "o", "down", "ple_gate"}  # the 1,024-column chunks' shapes
    for (n, k) in e4b.values():  # a narrower first chunk, the chunks after it as they were
        with gemv.configured(gv.first_64):
            assert gemv.config(n, k) == dict(gemv.base_config(n, k), first_k=64)
    for (n, k) in e4b.values():  # twice the default's chunk after an unchanged first one; twice its rows a program
        base = gemv.base_config(n, k)
        with gemv.configured(gv.chunks_2x):
            assert gemv.config(n, k) == dict(base, block_k=2 * base["block_k"])
        with gemv.configured(gv.rows_2x):
            assert gemv.config(n, k) == dict(base, block_n=2 * base["block_n"])
    assert gv.split_mode("triton") == ("triton", None)
    assert gv.split_mode("triton+combined") == ("triton", "combined")
    from kselect.kernels import skinny_gemm

    for name in gv.SKINNY:  # the skinny GEMM's variants launch on parameters it accepts
        with gv.variant(name):
            for n, k in e4b.values():
                skinny_gemm._params(n, k, {})
    from kselect.gemma4 import fused

    with gv.variant("cublas_rows"):
        assert (fused.GEMV_ROWS, fused.SKINNY_ROWS) == ((1, 1), None)
    with gv.variant("skinny_all"):
        assert fused.SKINNY_SHAPES == "all"
    assert (fused.SKINNY_ROWS, fused.SKINNY_SHAPES) == ((2, 16), "measured")
    with gv.variant("fold"):  # the add-norm in the GEMV's prologue: off by default, on inside
        assert fused.FOLD_NORMS
    assert not fused.FOLD_NORMS
    with gv.variant("tail_norms"):  # the add-norm in the GEMV's last program
        assert fused.TAIL_NORMS
        with gv.variant("no_tail_norms"):
            assert not fused.TAIL_NORMS
        assert fused.TAIL_NORMS
    assert not fused.TAIL_NORMS
    with pytest.raises(ValueError, match="'nope' in mode 'triton\\+nope': use one of small_whole_k"):
        gv.split_mode("triton+nope")
    # two variants at once: both contexts inside, both restored after; each part is checked
    assert gv.split_mode("triton+sk_split_all+pdl_b16") == ("triton", "sk_split_all+pdl_b16")
    with gv.variant("sk_split_all+pdl_b16"):
        assert fused.PDL_MAX_TOKENS == 16 and fused.SKINNY_SHAPES == "all"
        assert skinny_gemm._params(3072, 2560, {})["split_k"] > 1
    assert fused.PDL_MAX_TOKENS is None and fused.SKINNY_SHAPES == "measured"
    with gv.variant("tma"):  # one-row projections through TMA (kernels/gemv_tma.py), off by default
        assert fused.GEMV_TMA
    assert not fused.GEMV_TMA
    from kselect.kernels import pdl

    with gv.variant("pdl_b16+pdl_early"):  # PDL kernels release the next one before they wait
        assert pdl._early and fused.PDL_MAX_TOKENS == 16
    assert not pdl._early
    with gv.variant("pdl_late"):  # ... or, where they have a late point, after their reads
        assert pdl._late
    assert not pdl._late
    from kselect.kernels import rms_norm, split_merge, triton_paged

    with gv.variant("kv_pre+merge_last"):  # the attention's first-tile prefetch and merge in its last program
        assert triton_paged.PREFETCH_KV == triton_paged.REGS and split_merge.MERGE_LAST
    with gv.variant("kv_l2+res_early"):  # ... the first tile's lines into L2; the add-norm's residual before the wait
        assert triton_paged.PREFETCH_KV == triton_paged.L2 and rms_norm.RES_EARLY
    assert not rms_norm.RES_EARLY
    with gv.variant("attn_lean+kv_l2"):  # the attention's lean start, with the first tile's lines into L2
        assert triton_paged.LEAN_START and triton_paged.PREFETCH_KV == triton_paged.L2
    assert not triton_paged.LEAN_START
    with gv.variant("attn_pos32"):  # ... its positions in 32 bits
        assert triton_paged.POSITIONS_32
    assert not triton_paged.POSITIONS_32
    with gv.variant("gemv_pair1"):  # the batch-1 GeGLU pair in one K loop
        assert gemv.PAIR_ONE_LOOP
    with gv.variant("attn_qkv"):  # q/k/v's norms, rope and KV write inside the attention kernel
        assert fused.QKV_IN_ATTENTION
    assert not fused.QKV_IN_ATTENTION
    from kselect.kernels import w_evict

    with gv.variant("w_evict"):  # W's loads evict-first in L2
        assert w_evict.W_EVICT_FIRST is True
    assert w_evict.W_EVICT_FIRST is False
    with gv.variant("b1_off"):  # every switch of the cards' batch-1 rules off, whatever the card
        assert triton_paged.PREFETCH_KV == triton_paged.OFF and triton_paged.LEAN_START is False
        assert triton_paged.POSITIONS_32 is False and gemv.PAIR_ONE_LOOP is False
    assert triton_paged.PREFETCH_KV is None and gemv.PAIR_ONE_LOOP is None  # the card's rule again
    with gv.variant("b16_off"):  # every switch of the cards' batch-16 rules off, whatever the card
        assert fused.PDL_MAX_TOKENS == 1 and skinny_gemm.PREFETCH_W == 0
        assert triton_paged.SMALL["per_sm"] == 1 and triton_paged.OFFSETS_32 is False
    assert fused.PDL_MAX_TOKENS is None and skinny_gemm.PREFETCH_W is None  # the card's rule again
    assert triton_paged.SMALL["per_sm"] is None and triton_paged.OFFSETS_32 is None
    with gv.variant("b16_none"):  # ... and the small attention launch only up to batch 4, whatever the card
        assert fused.PDL_MAX_TOKENS == 1 and triton_paged.SMALL["per_sm"] == 1 and triton_paged.OFFSETS_32 is False
        assert triton_paged.SMALL["batch"] == triton_paged.SMALL_BATCH == 4 and skinny_gemm.PREFETCH_W == 0
    assert triton_paged.SMALL["batch"] is None and triton_paged.SMALL["per_sm"] is None
    from kselect.kernels import rms_norm

    with gv.variant("norm_w4"):  # the add-norm kernel with 4 warps a row, whatever its width
        assert rms_norm.row_warps(4096) == 4 and rms_norm.row_warps(1024) == 4
    assert rms_norm.row_warps(4096) == 8 and rms_norm.ROW_WARPS is None
    for bad in (3, 0, 64, True):
        with pytest.raises(ValueError, match="warps_per_row takes a power of two"):
            rms_norm.warps_per_row(bad)
    with gv.variant("splits4+attn_s1"):  # a small decode's attention split at most four ways, one pipeline stage
        assert triton_paged.small_decode(2, 520, 132) == (32, 1, 4)
    with gv.variant("attn_w8"):
        assert triton_paged.SMALL["warps"] == 8
    with gv.variant("attn_n16"):  # 16-key tiles: at batch 1 one page a program, twice the splits
        assert triton_paged.small_decode(2, 520, 132) == (16, 2, 33)
    assert triton_paged.small_decode(2, 520, 132) == (32, 2, 17) and triton_paged.SMALL["warps"] is None
    with gv.variant("attn_b16_x2"):  # the small launch up to batch 16, about two programs an SM
        assert triton_paged.SMALL["batch"] == 16 and triton_paged.small_decode(32, 520, 132) == (32, 2, 9)
    with triton_paged.small_launch(block_n=64, per_sm=2):  # ... on 64-key tiles
        assert triton_paged.small_decode(32, 520, 132) == (64, 2, 9)
    assert triton_paged.SMALL["batch"] is None and triton_paged.small_decode(32, 520, 132) == (32, 2, 5)
    with pytest.raises(ValueError, match="small_launch: splits=0"):
        triton_paged.small_launch(splits=0).__enter__()
    with pytest.raises(ValueError, match="small_launch: block_n=48"):
        triton_paged.small_launch(block_n=48).__enter__()
    with triton_paged.small_launch(batch=0):  # never the small launch (the GPU test's baseline)
        assert triton_paged.small_batch(torch.device("cuda", 0)) == 0
    with pytest.raises(ValueError, match="small_launch: batch=-1"):
        triton_paged.small_launch(batch=-1).__enter__()
    assert not triton_paged.PREFETCH_KV and not split_merge.MERGE_LAST
    with gv.variant("pdl_b16+sk_w_l2_4"):  # batch 16 under PDL, W's first four K tiles into L2 before the wait
        assert fused.PDL_MAX_TOKENS == 16 and skinny_gemm.PREFETCH_W == 4
    assert skinny_gemm.PREFETCH_W is None
    with gv.variant("gemv_w_l2"):  # batch 1: the GEMV's next two K chunks into L2 before the wait
        assert gemv.PREFETCH_W == 2
    assert gemv.PREFETCH_W == 0
    assert skinny_gemm._params(3072, 2560, {}).get("split_k", 1) == 1
    with pytest.raises(ValueError, match="'nope' in mode 'triton\\+pdl_b16\\+nope'"):
        gv.split_mode("triton+pdl_b16+nope")


def test_fusion_refuses_an_unknown_gemv_variant(capsys):
    fusion = importlib.import_module("kselect.measurement.gemma4.fusion")
    with pytest.raises(SystemExit) as e:
        fusion.main(["--out", "/tmp/never", "--modes", "triton+nope"])
    assert e.value.code == 2 and "projection variant 'nope'" in capsys.readouterr().err


def test_fusion_greedy_check_runs_the_last_fused_mode_measured():
    """The greedy check compares the unfused modules with the fused mode being measured (a variant included), not
    always plain "triton"."""
    fusion = importlib.import_module("kselect.measurement.gemma4.fusion")
    assert fusion.greedy_mode(["unfused", "triton", "triton+fold", "compile"]) == "triton+fold"
    assert fusion.greedy_mode(["triton_cublas", "unfused"]) == "triton_cublas"
    assert fusion.greedy_mode(["unfused"]) == "triton"


def test_objective_table_claims_no_prefill_gain_where_the_objective_prefills_on_vllms_kernels():
    """A per-phase objective that decodes on other kernels but prefills every group on vLLM's backend, blocks and KV
    dtype claims no prefill gain or loss (the ratio is noise); its decode metric is still compared, and a prefill on
    other blocks (the Triton decode's pages) is compared as usual."""
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    grp = lambda backend, blk, pre=None: dict(backend=backend, kernel_block=blk, kv_block=blk, kv_dtype="fp8_e4m3",  # noqa: E731
                                              **({"prefill_backend": pre} if pre else {}))
    vllm = dict(sliding_window=grp("FLASH_ATTN v3", 128), full_attention=grp("FLASH_ATTN v4", 64))
    same = dict(sliding_window=grp("FLASH_ATTN v3", 128), full_attention=grp("TRITON_ATTN", 64, "FLASH_ATTN v4"))
    other = dict(sliding_window=grp("TRITON_ATTN", 64, "FLASH_ATTN v3"), full_attention=grp("TRITON_ATTN", 64, "FLASH_ATTN v4"))
    sel = lambda name, point, groups: dict(preset="m", selection=name, kv="fp8", point=point, groups=groups)  # noqa: E731
    run = lambda name, dec, pre, point="": dict(preset="m", selection=name, kv="fp8", batch=1, point=point,  # noqa: E731
                                                decode_tok_s=dec, prefill_tok_s=pre)
    pf = lambda name, v, point="": dict(preset="m", selection=name, kv="fp8", prompt_len=4096, chunk=None,  # noqa: E731
                                        prefill_tok_s=v, point=point)
    d = dict(selections=[sel("vllm", "", vllm), sel("latency", "decode B1", other), sel("latency", "prefill 4096", same)],
             runs=[run("vllm", 50.0, 9_000.0), run("latency", 60.0, 8_500.0, "decode B1")],
             prefills=[pf("vllm", 65_000.0), pf("latency", 63_500.0, "prefill 4096")])
    t = {r["metric"]: r for r in e2e.objective_table(d)}
    assert t["prefill B1 x 4096"]["verdict"] == "same prefill kernels as vllm (no gain claimed)"
    assert t["prefill B1 x 4096"]["vs_vllm"] == pytest.approx(63_500 / 65_000)
    assert t["prefill B1 x prompt-len"]["verdict"] == "SLOWER than vllm"  # other pages: compared
    assert t["decode B1"]["verdict"] == "faster than vllm"
    assert e2e.prefill_kernels(d["selections"], "m", ("latency", "fp8", "prefill 4096")) == \
        e2e.prefill_kernels(d["selections"], "m", ("vllm", "fp8", ""))


def test_paired_median_interval_is_the_sign_test_order_statistics():
    """kselect/measurement/paired.py: the interval is [x_(k), x_(n+1-k)] for the largest k covering 95%; five rounds only
    reach the min and max (93.75%), fifteen the 4th and 12th values (96.5%)."""
    paired = importlib.import_module("kselect.measurement.paired")
    assert paired.median_ci([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, 1.0, 5.0, pytest.approx(0.9375))
    med, lo, hi, cov = paired.median_ci([float(i) for i in range(15)])
    assert (med, lo, hi) == (7.0, 3.0, 11.0) and cov == pytest.approx(1 - 2 * 576 / 2 ** 15)
    assert paired.median_ci([2.0]) == (2.0, 2.0, 2.0, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        paired.median_ci([])
    with pytest.raises(ValueError, match="differ in length"):
        paired.compare([1.0, 2.0], [1.0])


def test_objective_table_judges_interleaved_prefills_round_by_round():
    """An interleaved metric is faster or slower only where the per-round ratios' interval excludes 1: a 0.6% gain
    in every round is faster (the fixed 2% rule called it noise), a 3% median gain that flips between rounds is not."""
    e2e = importlib.import_module("kselect.measurement.e2e_report")
    sel = lambda name, point="": dict(preset="m", selection=name, kv="auto", point=point)  # noqa: E731
    run = lambda name, point="": dict(preset="m", selection=name, kv="auto", batch=1, point=point,  # noqa: E731
                                      decode_tok_s=50.0, prefill_tok_s=1.0)

    def table(latency_ms, vllm_ms, pin_ms):
        rnd = lambda name, ms, point="": dict(preset="m", selection=name, kv="auto", point=point,  # noqa: E731
                                              metric="prefill B1 x prompt-len", prefill_tok_s=512 / (sorted(ms)[2] / 1e3),
                                              prefill_ms_reps=ms)
        d = dict(selections=[sel("vllm"), sel("pin_fa3"), sel("latency", "decode B1")],
                 runs=[run("vllm"), run("pin_fa3"), run("latency", "decode B1")], prefills=[],
                 prefill_rounds=[rnd("vllm", vllm_ms), rnd("pin_fa3", pin_ms), rnd("latency", latency_ms, "decode B1")])
        return {r["metric"]: r for r in e2e.objective_table(d)}["prefill B1 x prompt-len"]

    drift = [100.0, 102.0, 99.0, 104.0, 101.0]  # the GPU's drift, shared by every selection in a round
    t = table([x * 0.994 for x in drift], drift, [x * 1.01 for x in drift])
    assert t["verdict"] == "faster than vllm; >= best pin (pin_fa3)"
    assert t["paired_vllm"]["ratio"] == pytest.approx(1 / 0.994) and t["paired_vllm"]["rounds"] == 5
    t = table([97.0, 103.0, 96.0, 102.0, 97.0], [100.0] * 5, [100.0] * 5)
    assert t["verdict"] == "within noise of vllm; >= best pin (pin_fa3)"
    t = table([x * 1.01 for x in drift], drift, [x * 0.99 for x in drift])
    assert t["verdict"] == "SLOWER than vllm; SLOWER than pin_fa3"
    assert e2e._ratio(t, "vs_vllm", "paired_vllm") == "0.990 [0.990, 0.990; 94% over 5 rounds]"


def test_fusion_latency_triton_picks_the_faster_triton_kernel_from_the_cards_data():
    """`--selection latency_triton`: the objective at the run's batch-1 decode point over the Triton kernels only. On the
    H100's data (kselect's own kernel measured faster at B1 x 520) both groups run TRITON_ATTN+kselect; on the CPU
    platform (no perf data, no Triton) the same overrides still compose to a selection."""
    fusion = importlib.import_module("kselect.measurement.gemma4.fusion")
    from kselect.gemma4.build import select

    over = fusion.selection_overrides("latency_triton", 512)
    assert "objective=latency" in over and "objective.decode.context=512" in over and "objective.decode.batch=1" in over
    assert {f"platform.packages.{p}=false" for p in ("fa3", "fa4", "flashinfer")} <= set(over)
    _, sel = select(["platform=h100", "model=gemma4_e4b", *over])
    assert {(g.backend, g.build) for g in sel.groups if not g.draft} == {("TRITON_ATTN", "kselect")}
    assert fusion.selection_overrides("pin_triton", 512) == ["attention.backend=TRITON_ATTN"]
    _, cpu = select(["platform=cpu", "model=gemma4_tiny", *over])
    assert cpu.groups


@pytest.mark.parametrize("name, kselect_builds", [("latency_vllm_b16", False), ("latency_b16", True)])
def test_fusion_batch16_selections_resolve_at_the_batch16_point(name, kselect_builds):
    """`--selection latency_vllm_b16` / `latency_b16`: the objective at B16 x the run's prompt, over the kernels vLLM
    ships (no TRITON_ATTN+kselect, no upstream FA3) or with kselect's builds. On the H100's B16 x 520 data the sliding
    layers go to vLLM's Triton kernel (17.2 us a call; FA4 18.5) and the full ones to FlashInfer (24.7; FA4, vLLM's
    choice, 37.4); with kselect's builds both go to kselect's Triton kernel under the card's batch-16 rule (14.9 and
    22.6 us, bench/results/h100/b16_rule/perf_refresh.log)."""
    fusion = importlib.import_module("kselect.measurement.gemma4.fusion")
    from kselect.gemma4.build import select

    over = fusion.selection_overrides(name, 512)
    assert {"objective=latency", "objective.decode.batch=16", "objective.decode.context=512"} <= set(over)
    assert ("platform.packages.kselect_triton=false" in over) is not kselect_builds
    _, sel = select(["platform=h100", "model=gemma4_e4b", *over])
    groups = {g.kind: g for g in sel.groups if not g.draft}
    assert groups and all("B16 x 512" in " ".join(g.reasons) for g in groups.values())
    want = {"sliding_window": "TRITON_ATTN", "full_attention": "TRITON_ATTN" if kselect_builds else "FLASHINFER"}
    assert {k: g.backend for k, g in groups.items()} == want
    assert all((g.build == "kselect") is kselect_builds for g in groups.values())


def test_tuned_variants_read_the_cards_microbenchmark_record(tmp_path, monkeypatch):
    """`tuned` and `tma_tuned` take each shape's fastest config from the record their variable names (the GEMV's with
    its first chunk of one block; the TMA GEMV's as recorded), leave other shapes to the table, and refuse to run
    without a record."""
    gv = importlib.import_module("kselect.measurement.gemv_variants")
    from kselect.gemma4 import fused
    from kselect.kernels import gemv, gemv_tma

    def record(cfg):
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"rows": [dict(rows=1, n=3072, k=2560, triton=dict(cfg=cfg)),
                                             dict(rows=16, n=2560, k=2048, triton=dict(cfg=dict(block_n=64)))]}))
        return str(path)

    monkeypatch.setenv("KSELECT_GEMV_TABLE", record(dict(block_n=4, block_k=512, num_warps=8)))
    with gv.variant("tuned"):
        assert gemv.config(3072, 2560) == dict(block_n=4, block_k=512, first_k=512, num_warps=8, ahead=0)
        assert gemv.config(2560, 2048)["block_n"] == 2  # not in the record: the table's
    monkeypatch.setenv("KSELECT_GEMV_TMA_TABLE", record(dict(block_n=16, block_k=128, stages=6, num_warps=4)))
    with gv.variant("tma_tuned"):
        assert fused.GEMV_TMA and gemv_tma.config(3072, 2560) == dict(block_n=16, block_k=128, stages=6, num_warps=4)
        assert gemv_tma.config(2560, 2048) == dict(block_n=8, block_k=256, stages=4, num_warps=4)
    assert not fused.GEMV_TMA and gemv_tma.config(3072, 2560)["block_n"] == 8
    monkeypatch.delenv("KSELECT_GEMV_TMA_TABLE")
    with pytest.raises(ValueError, match="set KSELECT_GEMV_TMA_TABLE"):
        gv.variant("tma_tuned")
    assert not fused.GEMV_TMA  # nothing left switched on by the refusal
