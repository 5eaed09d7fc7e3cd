"""Engine: sampling, EOS handling, the main job (`kselect run`)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kselect.gemma4.engine import Engine, EngineConfig, sample
from g4_helpers import simple_selection  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def eng(model, **kw):
    return Engine(model, simple_selection(model.args), EngineConfig(max_seqs=4, max_seq_len=64, **kw))


def test_sampling_is_seeded_and_top_k_1_is_greedy(models, prompts):
    model, _ = models["edge"]
    e = eng(model)
    greedy = e.generate(prompts, 10).tokens
    a = e.generate(prompts, 10, temperature=1.0, top_k=50, seed=1).tokens
    b = e.generate(prompts, 10, temperature=1.0, top_k=50, seed=1).tokens
    c = e.generate(prompts, 10, temperature=1.0, top_k=50, seed=2).tokens
    assert a == b and a != c and a != greedy
    assert e.generate(prompts, 10, temperature=0.7, top_k=1, seed=5).tokens == greedy


def test_sample_respects_top_k_and_temperature():
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0]]).repeat(4000, 1)
    picks = sample(logits, temperature=1.0, top_k=2, generator=g)
    assert set(picks.tolist()) == {3, 4}
    frac4 = (picks == 4).float().mean().item()
    assert abs(frac4 - torch.sigmoid(torch.tensor(1.0)).item()) < 0.03  # softmax over {3, 4}
    cold = sample(logits, temperature=0.05, generator=g)
    assert (cold == 4).all()
    assert sample(logits[:2]).tolist() == [4, 4]


def test_generation_stops_at_eos(models, prompts):
    model, _ = models["edge"]
    e = eng(model)
    free = e.generate(prompts, 8, stop_at_eos=False)
    eos = free.tokens[1][2]  # pretend the third token of sequence 1 is EOS
    res = e.generate(prompts, 8, eos_token_id=eos)
    assert res.tokens[1] == free.tokens[1][:3]
    for i in (0, 2):
        t = free.tokens[i]
        assert res.tokens[i] == (t[: t.index(eos) + 1] if eos in t else t)


def test_batched_equals_one_at_a_time(models, prompts):
    """A batch of unequal lengths generates exactly what each prompt generates alone."""
    model, _ = models["large"]
    e = eng(model)
    batch = e.generate(prompts, 8).tokens
    alone = [e.generate([p], 8).tokens[0] for p in prompts]
    assert batch == alone


# ------------------------------------------------------------------------------ the main job


def run_main(capsys, *argv):
    from kselect.commands.run import main

    n = torch.get_num_threads()
    try:
        assert main(list(argv)) == 0
    finally:
        torch.set_num_threads(n)
    return capsys.readouterr().out


def test_main_job_default(capsys):
    out = run_main(capsys, "platform=cpu", "--max-new-tokens", "6")
    assert "sliding_window" in out and "full_attention" in out and "TORCH_REFERENCE" in out  # the table
    assert "attention backend per group: sliding_window -> TORCH_REFERENCE (TorchReferenceBackend), " \
           "full_attention -> TORCH_REFERENCE (TorchReferenceBackend)" in out
    assert "seeded random weights" in out
    assert "'The quick brown fox' -> '" in out
    assert "tokens/s" in out and "prefill:" in out and "decode:" in out
    assert "numerics: not checked: every group runs TORCH_REFERENCE, the reference itself" in out  # no check claimed when nothing differs


def test_main_job_runs_on_a_cpu_machine_without_triton():
    """Triton is a GPU dependency (pyproject's `gpu` and `test` extras): the CPU main job imports none of it."""
    code = ("import sys; sys.modules['triton'] = None\n"  # an import of triton now fails, as where it is missing
            "from kselect.commands.run import main\n"
            "sys.exit(main(['platform=cpu', '--max-new-tokens', '2']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "decode:" in r.stdout


def test_main_job_fp8_calibrated(capsys):
    out = run_main(capsys, "platform=cpu", "kv_cache=fp8", "kv_cache.scales=calibrated", "--max-new-tokens", "4",
                   "--temperature", "0.9", "--top-k", "20", "--prompt", "Hello there", "--prompt", "A")
    assert "calibrated FP8 KV scales over 4 layers" in out
    assert "fp8_e4m3" in out and "sampled (T=0.9, top_k=20, seed=0)" in out
    assert "numerics: not checked: every group runs TORCH_REFERENCE, the reference itself" in out
    assert "numerics: max rel logit error vs TORCH_REFERENCE with a float32 KV cache:" in out
    assert "with a float32 KV cache" in out


def test_main_job_reports_errors_in_one_line():
    r = subprocess.run([sys.executable, "-m", "kselect", "run", "platform=cpu", "model=gemma4_31b"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "gemma4_31b has 30.7B parameters" in r.stderr and "Traceback" not in r.stderr
    from kselect.commands.run import main
    from kselect.gemma4.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="checkpoint folder /nonexistent/x: does not exist"):
        main(["platform=cpu", "model.checkpoint=/nonexistent/x"])


@pytest.mark.parametrize("kind", ["cpu"])
def test_main_job_runs_a_checkpoint_folder(capsys, tmp_path, models, kind):
    """model.checkpoint=<folder> (our writer, HF layout) with its own tokenizer.json."""
    import yaml

    from kselect.gemma4.checkpoint import BUNDLED_TOKENIZER, build_random, save_checkpoint
    from kselect.gemma4.config import Gemma4Args

    d = yaml.safe_load((ROOT / "conf" / "model" / "gemma4_tiny.yaml").read_text())
    m = build_random(Gemma4Args.from_model_config(d), seed=42)
    save_checkpoint(m, tmp_path, tokenizer=BUNDLED_TOKENIZER)
    out = run_main(capsys, f"platform={kind}", f"model.checkpoint={tmp_path}", "--max-new-tokens", "3", "--no-check")
    assert f"from checkpoint {tmp_path}" in out and "tokens/s" in out
    from kselect.commands.run import main
    from kselect.run import RunError

    with pytest.raises(RunError, match="sliding_window: preset 8, checkpoint 16"):
        main([f"platform={kind}", f"model.checkpoint={tmp_path}", "model.sliding_window=8"])


@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_graph_safe_paths_match_eager(models, prompts, kv):
    """The code a CUDA graph captures (gathered MoE experts, index_copy cache writes without host
    syncs) gives the same tokens and logits as the eager paths, here run on CPU."""
    model, _ = models["all"]
    sel = simple_selection(model.args, kv_block_size=32, kv_cache_dtype=kv)
    ref = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64)).generate(prompts, 6, return_logits=True)
    e = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    e.runner.static_paths = True
    got = e.generate(prompts, 6, return_logits=True)
    assert got.tokens == ref.tokens
    from kselect.gemma4.engine import max_rel_error

    # fp32: rounding-level; FP8: a 1e-7 difference in the MoE sum can flip one FP8 rounding
    assert max_rel_error(torch.stack(got.logits), torch.stack(ref.logits)) < (1e-5 if kv == "auto" else 1e-2)


@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3", "fp8_e5m2"])
def test_static_cache_write_is_bitwise_write_kv(models, kv):
    model, _ = models["all"]
    sel = simple_selection(model.args, kv_block_size=16, kv_cache_dtype=kv)
    caches = [Engine(model, sel, EngineConfig(max_seqs=2, max_seq_len=64)).cache.groups["full_attention"]
              for _ in range(2)]
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(7, 1, 128, generator=g) * 3 for _ in range(2))
    slots = torch.tensor([0, 1, 2, 17, 18, 40, 63])
    for c, static in zip(caches, (False, True)):
        c.set_scales({2: (0.02, 0.03)})
        c.write(2, k, v, slots, static=static)
    for a, b in ((caches[0].k[2], caches[1].k[2]), (caches[0].v[2], caches[1].v[2])):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)) and a.float().abs().sum() > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("step", [None, 8], ids=["whole-prefill", "chunked-prefill"])
@pytest.mark.parametrize("over", [(), ("model.dtype=bfloat16", "attention.backend=FLASHINFER")],
                         ids=["default", "flashinfer-bf16"])
def test_cuda_graph_decode_matches_eager(step, over):
    """Decode crosses the window (16) and several kv blocks, so the sliding group gives blocks back and
    takes new ones while graphs replay (tables reloaded); with chunks of 8 its pool is small. FLASHINFER
    re-plans before every replay without waiting for the GPU (kernels/flashinfer.py)."""
    if "attention.backend=FLASHINFER" in over:
        pytest.importorskip("flashinfer", reason="the FLASHINFER path needs flashinfer")
    from kselect.selector.api import compose, resolve
    from kselect.gemma4.build import build_model

    cfg = compose(list(over))
    sel = resolve(cfg)
    model, _, _ = build_model(cfg, seed=0)
    prompts = [[2] + list(range(10, 10 + n)) for n in (5, 17, 30)]
    eager = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=128, cuda_graphs=False,
                                            max_step_tokens=step)).generate(prompts, 40, return_logits=True)
    g = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=128, cuda_graphs=True, max_step_tokens=step))
    if not g.use_graphs:
        pytest.skip("the selected backends do not support CUDA graphs")
    res = g.generate(prompts, 40, return_logits=True)
    assert res.cuda_graphs and not res.notes
    assert res.tokens == eager.tokens


def test_main_job_unimplemented_backend_is_a_clear_error():
    # FLEX_ATTENTION is a valid selection on CPU, but kselect has no kernel for it: exit 2, no fallback
    r = subprocess.run([sys.executable, "-m", "kselect", "run", "platform=cpu", "attention.backend=FLEX_ATTENTION"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "FLEX_ATTENTION" in r.stderr and "Traceback" not in r.stderr


def test_token_ids_outside_the_embedding_tables_are_refused(models):
    """A host token id must be an integer that indexes the token table and the per-layer-input table: otherwise the
    engine says which sequence and id, before any kernel reads out of bounds or a float is truncated to another id;
    a refused step leaves the sequences as they were. NumPy's integers are integers."""
    import numpy as np

    model, _ = models["all"]
    e = eng(model)
    vocab = min(model.args.vocab_size, model.args.vocab_size_per_layer_input)
    e.extend([0], [[1, 2, 3]])
    for bad, what in ((vocab, "not in"), (-1, "not in"), (np.int64(vocab), "not in"), ("7", "not an integer in"),
                      (None, "not an integer in"), (3.0, "not an integer in"), (3.5, "not an integer in"),
                      (True, "not an integer in"), (float("nan"), "not an integer in")):
        with pytest.raises(ValueError, match=rf"sequence 1: token id {re.escape(repr(bad))} is {what} \[0, {vocab}\)"):
            e.extend([0, 1], [[4], [5, bad, 6]])
        with pytest.raises(ValueError, match=rf"sequence 2: token id {re.escape(repr(bad))} is {what} \[0, {vocab}\)"):
            e.decode([2], [bad])
    assert e.seq_lens == {0: 3}
    assert e.decode([0], [vocab - 1]).shape == (1, model.args.vocab_size)
    e.extend([1], [[4, np.int32(5), np.int64(6)]])
    assert e.seq_lens == {0: 4, 1: 3}
