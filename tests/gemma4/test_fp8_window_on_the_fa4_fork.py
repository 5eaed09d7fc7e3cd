"""The H200 check of the refuted `pr48666` path (issue #14's checks, part b: bench/results/LOG.md) on CPU: the
31B FP8 selection under `rules=post_pr52987 overlay=[pr48666]`, run by `kselect run`'s library call (kselect/run.py) with
the long prompt of kselect.measurement.gemma4.long_prompt, really calls vLLM's FA4 fork on an FP8 cache
with 64-token pages, a 1,024-token window and more keys than the window holds: the windowed
FP8-KV case conformance refuted (`FLASH_ATTN_v4:fp8:d256:window`). The kernels are emulated on the
reference (the adapter's call is what is checked, not the kernel) and the model is shrunk to six
layers and two heads with the 31B's head sizes and window; the selection is the real 31B one."""

from __future__ import annotations

import pytest
import torch

OVERRIDES = ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8", "rules=post_pr52987", "overlay=[pr48666]"]


def _long_prompt(tokens: int) -> str:
    from kselect.measurement.gemma4.long_prompt import long_prompt

    return long_prompt(tokens)


@pytest.fixture
def fork_calls(monkeypatch):
    """Every FlashAttention kernel call, emulated on the fp32 reference, with what it was given."""
    from kselect.kernels import flash_attn as fa
    from kselect.kernels import flash_attn_loader as loader
    from kselect.kernels.reference import paged_attention

    calls = []

    def recorder(name):
        def emulate(q, kc, vc, cu, used, bt, max_q, max_k, scale, *, causal=True, window_left=-1, sinks=None,
                    q_descale=None, k_descale=None, v_descale=None, out_dtype=None, **_):
            calls.append(dict(fn=name, head=q.shape[-1], cache_dtype=kc.dtype, page=kc.shape[1],
                              window_left=window_left, max_k=int(used.max()), kv_descale=k_descale is not None))
            return paged_attention(q, kc, vc, cu, used, bt, scale, causal=causal, window_left=window_left,
                                   sinks=sinks, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                                   out_dtype=out_dtype)
        return emulate

    for name in ("fa3_forward", "fa4_forward", "fa4_fork_forward"):
        monkeypatch.setattr(fa, name, recorder(name))
    for name in ("load_fa4_upstream", "load_fa4_fork"):
        monkeypatch.setattr(loader, name, lambda: None)
    return calls


def test_long_prompt_passes_the_31b_window_on_the_fp8_fork(fork_calls, monkeypatch, capsys):
    from kselect import run
    from kselect.gemma4.build import select
    from kselect.gemma4.checkpoint import build_random, load_tokenizer
    from kselect.gemma4.config import Gemma4Args

    cfg, sel = select(OVERRIDES)
    window = cfg.model.sliding_window
    assert window == 1024
    sliding = {g.kind: g for g in sel.groups}["sliding_window"]
    assert (sliding.backend, sliding.flash_attn_version, sliding.kv_block_size, sliding.descale) == (
        "FLASH_ATTN", 4, 64, "kv_dequant")

    text = _long_prompt(1536)
    n_prompt = len(load_tokenizer().encode(text).ids) + 1  # + BOS
    assert n_prompt > window + 256

    # the 31B's head sizes, window and K=V full layers; six layers, one KV head per group (the
    # selection's groups say so too; their backends, blocks and descales are the 31B's)
    small = dict(cfg.model.model_dump(), num_hidden_layers=6, hidden_size=64, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=1, num_global_key_value_heads=1)
    model = build_random(Gemma4Args.from_model_config(small), seed=0).to(torch.bfloat16)

    def one_head(overrides):
        c, s = select(overrides)
        return c, s.model_copy(update=dict(groups=[g.model_copy(update=dict(num_kv_heads=1)) for g in s.groups]))

    monkeypatch.setattr(run, "select", one_head)
    monkeypatch.setattr(run, "build_model", lambda cfg, seed: (model, load_tokenizer(), "shrunk 31B"))
    rc = run.run(OVERRIDES, run.RunOptions(prompts=(text,), max_new_tokens=2, cuda_graphs=False))
    out = capsys.readouterr().out
    assert rc == 0, out  # the emulated fork is the reference: the check passes here; on the H200 it must not

    fork = [c for c in fork_calls if c["fn"] == "fa4_fork_forward" and c["head"] == 256]
    assert fork, fork_calls[:3]
    assert {c["cache_dtype"] for c in fork} == {torch.float8_e4m3fn}
    assert {c["page"] for c in fork} == {64} and all(c["kv_descale"] for c in fork)
    assert {c["window_left"] for c in fork} == {window - 1}
    # the prefill and every decode step read more keys than the window holds: the window masks keys
    assert max(c["max_k"] for c in fork) >= n_prompt > window
    assert sum(c["max_k"] > window for c in fork) >= 2 * 5  # prefill + decode calls on 5 sliding layers
    assert "FLASH_ATTN v4 vs TORCH_REFERENCE" in out
