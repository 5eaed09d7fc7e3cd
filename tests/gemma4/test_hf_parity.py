"""Our Gemma-4 against HF transformers' Gemma4ForCausalLM (fp32, eager) on the same weights.

Prefill and incremental decode go through the paged cache and the TORCH_REFERENCE backend (the
only attention path the model has), for a batch of unequal lengths longer than the window.
"""

import pytest
import torch

from g4_helpers import CONFIGS, HF_RTOL, hf_logits
from kselect.gemma4.engine import Engine, EngineConfig, max_rel_error
from g4_helpers import simple_selection  # noqa: E402

NAMES = list(CONFIGS)


def engine_for(model, **kw):
    return Engine(model, simple_selection(model.args, **kw), EngineConfig(max_seqs=4, max_seq_len=64))


@pytest.mark.parametrize("name", NAMES)
def test_prefill_logits_match_hf(models, prompts, name):
    model, hf = models[name]
    outs = engine_for(model).extend([0, 1, 2], prompts, all_logits=True)
    for p, got in zip(prompts, outs):
        ref = hf_logits(hf, p)
        assert got.shape == ref.shape == (len(p), 512)
        # the 0.5 softcap is active but not saturated everywhere
        assert (ref.abs() > 0.45).float().mean() < 0.2 and (ref.abs() > 0.25).float().mean() > 0.1
        assert max_rel_error(got, ref) < HF_RTOL


@pytest.mark.parametrize("name", NAMES)
def test_incremental_decode_matches_hf(models, prompts, name):
    """Prefill, then single-token decode steps and one 3-token chunk per sequence, all against
    HF's full forward over the whole sequence (positions cross the window of 8)."""
    model, hf = models[name]
    eng = engine_for(model)
    g = torch.Generator().manual_seed(7)
    cont = [torch.randint(3, 512, (9,), generator=g).tolist() for _ in prompts]
    seqs = [0, 1, 2]
    got = {s: [lg] for s, lg in zip(seqs, eng.extend(seqs, prompts, all_logits=True))}
    for step in range(6):  # decode: one token each
        step_logits = eng.decode(seqs, [c[step] for c in cont])
        assert step_logits.shape == (3, 512)
        for s in seqs:
            got[s].append(step_logits[s : s + 1])
    # chunked: 3 tokens per sequence in one varlen step (sequences in a different order)
    order = [2, 0, 1]
    chunk = eng.extend(order, [cont[s][6:9] for s in order], all_logits=True)
    for s, lg in zip(order, chunk):
        got[s].append(lg)
    for s in seqs:
        full = prompts[s] + cont[s]
        ours = torch.cat(got[s])
        assert ours.shape[0] == len(full)
        ref = hf_logits(hf, full)
        assert max_rel_error(ours, ref) < HF_RTOL
        # decode positions alone (the cache path), not hidden by the prefill part
        assert max_rel_error(ours[len(prompts[s]):], ref[len(prompts[s]):]) < HF_RTOL


@pytest.mark.parametrize("name", NAMES)
def test_greedy_generation_matches_hf_generate(models, prompts, name):
    model, hf = models[name]
    n = 12
    res = engine_for(model).generate(prompts, max_new_tokens=n)
    for p, toks in zip(prompts, res.tokens):
        with torch.no_grad():
            ids = torch.tensor([p])
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
        ref = out[0, len(p):].tolist()
        if model.args.eos_token_id in ref:  # HF pads after EOS; we stop there
            ref = ref[: ref.index(model.args.eos_token_id) + 1]
        assert toks == ref
    assert res.prompt_tokens == sum(map(len, prompts)) and res.decode_tokens > 0
    assert res.prefill_tok_s > 0 and res.decode_tok_s > 0


class SpyBackend:
    """Wraps a backend; records every call (group, q/k/v shapes, cache identity, params)."""

    def __init__(self, inner, kind, log):
        self.inner, self.kind, self.log = inner, kind, log

    def forward(self, q, k_cache, v_cache, meta, layer):
        self.log.append((self.kind, q.shape[0], k_cache.data_ptr(), layer))
        return self.inner.forward(q, k_cache, v_cache, meta, layer)

    def supports_cuda_graphs(self):
        return False


def test_every_layer_attends_through_its_group_backend(models, prompts):
    model, _ = models["all"]
    args = model.args
    from kselect.backends.registry import make_backend
    from kselect.gemma4.engine import model_groups

    sel = simple_selection(args, kv_block_size={"sliding_attention": 16, "full_attention": 32})
    groups = model_groups(sel)
    log = []
    spies = {k: SpyBackend(make_backend(g), k, log) for k, g in groups.items()}
    eng = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=64), backends=spies)
    eng.extend([0, 1, 2], prompts)
    eng.decode([0, 1, 2], [5, 6, 7])
    assert len(log) == 2 * args.num_hidden_layers  # prefill + decode, one call per layer
    for step in range(2):
        calls = log[step * args.num_hidden_layers:(step + 1) * args.num_hidden_layers]
        for i, (kind, nq, kptr, params) in enumerate(calls):
            assert kind == args.layer_types[i]
            assert nq == (sum(map(len, prompts)) if step == 0 else 3)
            src = args.kv_source(i)
            gc = eng.cache.groups[kind]
            assert kptr == gc.k[src].data_ptr()  # shared layers read their producer's cache
            assert params.softmax_scale == 1.0
            assert params.window_left == (args.sliding_window - 1 if kind == "sliding_attention" else -1)
    # layers 4 and 5 are KV-shared: they own no cache; 3 and 2 are their producers
    assert args.kv_source(4) == 3 and args.kv_source(5) == 2
    assert sorted(eng.cache.groups["sliding_attention"].k) == [0, 1, 3]
    assert sorted(eng.cache.groups["full_attention"].k) == [2]


def test_bf16_embedding_scales_round_like_hf(models):
    """sqrt(hidden) and sqrt(ple_dim) are cast to the weight dtype before scaling (bf16: sqrt(32) =
    5.657 -> 5.65625), exactly as HF; the embeddings and PLE inputs match HF's bit for bit in bf16."""
    from kselect.gemma4.checkpoint import build_random
    from g4_helpers import EMBED_STD, hf_twin, make_args

    m = build_random(make_args("edge", dtype="bfloat16"), seed=4, embed_std=EMBED_STD)
    hf = hf_twin(build_random(make_args("edge"), seed=4, embed_std=EMBED_STD)).to(torch.bfloat16)
    ids = torch.arange(3, 200)
    with torch.no_grad():
        emb = m._embed(ids)
        assert torch.equal(emb, hf.model.embed_tokens(ids[None])[0])
        # sqrt(256) = 16 is exact; sqrt(32) is not: the rounded scale is what HF uses
        assert m.scale_in(torch.bfloat16, 32**0.5) == 5.65625 != 32**0.5
        w = m.embed_tokens_per_layer.weight[ids]
        assert not torch.equal(w * 5.65625, (w.float() * 32**0.5).to(torch.bfloat16))
        ref = hf.model.project_per_layer_inputs(emb[None], hf.model.get_per_layer_inputs(ids[None]))[0]
        assert torch.equal(m._per_layer_inputs(ids, emb), ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_tables_for_both_types_at_once_are_bit_equal_per_type(dtype):
    """Gemma4.rope_tables_all (three kernels a step) gives each layer type's rope_cos_sin (seven a type) bit for bit,
    with fp32 frequencies (keep_rope_fp32) and with frequencies left in bf16 by `.to()`, at large positions too.
    Runs on the GPU where there is one (bench/results/h200/pdl/, part T)."""
    from kselect.gemma4.checkpoint import build_random
    from kselect.gemma4.config import FULL, SLIDING
    from kselect.gemma4.model import rope_cos_sin
    from g4_helpers import make_args

    dev = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU: CUDA's cos/sin storing to bf16
    m = build_random(make_args("all"), seed=3).to(dev)
    positions = torch.tensor([0, 1, 7, 500, 4095, 131_071, 1_000_003], device=dev)
    for model in (m, build_random(make_args("all"), seed=3).to(dev, torch.bfloat16)):
        got = model.rope_tables_all(positions, dtype)
        for kind, inv in ((SLIDING, model.sliding_inv_freq), (FULL, model.full_inv_freq)):
            for a, b in zip(got[kind], rope_cos_sin(positions, inv, dtype)):
                assert a.dtype == dtype and torch.equal(a, b), (kind, model.rope_inv_row.dtype)
    assert m.rope_inv_row.dtype == torch.float32
