"""Gemma-4 MTP: the drafter, speculative decoding over the paged cache, and the FP8 draft scales.

The target is the bundled tiny preset (conf/model/gemma4_tiny.yaml: sliding + full layers with
two head sizes, PLE, KV sharing, K=V, MoE) with seeded weights whose greedy output mixes runs and
changes; the drafter has the preset's `drafter:` shapes. The `copy` drafter (copy_init) gets a
mix of full, partial and zero acceptance on it, so every rollback path runs; the random one
accepts almost nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from kselect.backends.registry import make_backend
from kselect.gemma4.checkpoint import build_random, load_drafter, save_drafter
from kselect.gemma4.config import FULL, SLIDING, DrafterArgs, DrafterError, Gemma4Args, target_kv_layer
from kselect.gemma4.draft_kv import draft_groups_of
from kselect.gemma4.drafter_init import build_random_drafter
from kselect.gemma4.engine import Engine, EngineConfig, model_groups
from g4_helpers import simple_selection  # noqa: E402
from kselect.gemma4.speculative import SpeculativeDecoder, accept_greedy, rejection_sample
from kselect.kernels.tolerances import rel_err
from kselect.selector.api import compose, resolve

ROOT = Path(__file__).resolve().parents[2]
PRESET = yaml.safe_load((ROOT / "conf/model/gemma4_tiny.yaml").read_text())
TARGET_SEED, TARGET_EMBED_STD = 0, 0.07  # greedy output with variety and ~1/3 copy-drafter acceptance
N_NEW, K = 12, 4
CELL = ["platform=cpu", "model=gemma4_tiny", "spec_decode=mtp"]
# Draft logits over an FP8 (e4m3, 3 mantissa bits) copy of an fp32 cache vs over the fp32 cache,
# after 4 draft layers: the FP8 rounding of K and V alone (kernels/tolerances.py allows 6e-2 on one
# attention output).
FP8_DRAFT_TOL = 0.08

_SELECTIONS: dict[tuple, object] = {}


def selection(*overrides: str):
    """The selector's answer for the tiny model on CPU with MTP (cached: Hydra composes are slow)."""
    key = tuple(overrides)
    if key not in _SELECTIONS:
        _SELECTIONS[key] = resolve(compose(CELL + list(overrides)))
    return _SELECTIONS[key]


def with_block(sel, block: int):
    groups = tuple(g.model_copy(update=dict(kv_block_size=block, kernel_block_size=block)) for g in sel.groups)
    return sel.model_copy(update=dict(groups=groups, block_size=block))


@pytest.fixture(scope="module")
def target():
    return build_random(Gemma4Args.from_model_config(PRESET), seed=TARGET_SEED, embed_std=TARGET_EMBED_STD)


@pytest.fixture(scope="module")
def dargs(target):
    return DrafterArgs.from_preset(target.args, PRESET["drafter"])


@pytest.fixture(scope="module")
def copy_drafter(target, dargs):
    return build_random_drafter(dargs, seed=3, copy_from=target.embed_tokens.weight)


@pytest.fixture(scope="module")
def random_drafter(dargs):
    return build_random_drafter(dargs, seed=3)


@pytest.fixture(scope="module")
def mtp_prompts():
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(3, 512, (n,), generator=g).tolist() for n in (23, 11, 17)]  # > window 16 after decode


# ---------------------------------------------------------------------------- the drafter


def test_drafter_shapes_come_from_the_preset_and_the_target(target, dargs, copy_drafter):
    args = target.args
    assert (dargs.hidden_size, dargs.num_hidden_layers, dargs.backbone_hidden_size) == (64, 4, args.hidden_size)
    assert dargs.layer_types == [SLIDING, SLIDING, SLIDING, FULL]
    names = dict(copy_drafter.state_dict())
    # Q-only attention, HF parameter names, pre/post projections between the two widths
    assert names["model.layers.0.self_attn.q_proj.weight"].shape == (4 * 64, 64)
    assert names["model.layers.3.self_attn.q_proj.weight"].shape == (4 * 128, 64)
    assert not [n for n in names if "k_proj" in n or "v_proj" in n or "k_norm" in n]
    assert names["pre_projection.weight"].shape == (64, 2 * args.hidden_size)
    assert names["post_projection.weight"].shape == (args.hidden_size, 64)
    assert names["lm_head.weight"].shape == (args.vocab_size, 64)
    # vLLM's wiring: the last non-KV-shared target layer of each type (layers 4/5 of the tiny model are shared)
    assert target_kv_layer(args, SLIDING) == 3 and target_kv_layer(args, FULL) == 2
    sel = selection()
    for kind, src in ((SLIDING, 3), (FULL, 2)):
        g = sel.group("sliding_window" if kind == SLIDING else "full_attention", draft=True)
        assert g.reads_from == (src,)


def test_drafter_checkpoint_roundtrip_and_errors(tmp_path, target, dargs, copy_drafter):
    folder = save_drafter(copy_drafter, tmp_path / "asst")
    loaded = load_drafter(folder, target.args)
    for k, v in copy_drafter.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    from safetensors.torch import load_file, save_file

    sd = load_file(str(folder / "model.safetensors"))
    assert "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd  # tied, as HF saves it

    def broken(name, mutate):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text((folder / "config.json").read_text())
        t = dict(sd)
        mutate(t)
        save_file(t, str(d / "model.safetensors"))
        return d

    with pytest.raises(DrafterError, match="missing tensor 'model.layers.2.self_attn.q_norm.weight'"):
        load_drafter(broken("missing", lambda t: t.pop("model.layers.2.self_attn.q_norm.weight")), target.args)
    with pytest.raises(DrafterError, match=r"'pre_projection.weight' has shape \(64, 10\)"):
        load_drafter(broken("shape", lambda t: t.__setitem__("pre_projection.weight", torch.zeros(64, 10))),
                     target.args)
    with pytest.raises(DrafterError, match="k_proj.*Q-only"):
        load_drafter(broken("kproj", lambda t: t.__setitem__("model.layers.0.self_attn.k_proj.weight",
                                                             torch.zeros(128, 64))), target.args)
    other = Gemma4Args.from_model_config({**PRESET, "hidden_size": 256})
    with pytest.raises(DrafterError, match="backbone_hidden_size=128 but the target has 256"):
        load_drafter(folder, other)
    (tmp_path / "notasst").mkdir()
    (tmp_path / "notasst" / "config.json").write_text('{"model_type": "gemma4_text"}')
    with pytest.raises(DrafterError, match="not 'gemma4_assistant'"):
        load_drafter(tmp_path / "notasst", target.args)
    with pytest.raises(DrafterError, match="no .safetensors"):
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "config.json").write_text((folder / "config.json").read_text())
        load_drafter(tmp_path / "empty", target.args)


def test_ordered_embeddings_head_scores_only_the_top_centroids(target):
    """E2B/E4B head: only the tokens of the top-k centroids get finite logits, equal to the plain head's."""
    da = DrafterArgs.from_preset(target.args, {**PRESET["drafter"], "use_ordered_embeddings": True})
    d = build_random_drafter(da, seed=5)
    h = torch.randn(3, da.hidden_size, generator=torch.Generator().manual_seed(0))
    out = d.masked_embedding(h, d.lm_head.weight)
    full = d.lm_head(h)
    per = da.vocab_size // da.num_centroids
    finite = torch.isfinite(out)
    assert finite.sum(-1).tolist() == [da.centroid_intermediate_top_k * per] * 3
    assert torch.allclose(out[finite], full[finite], atol=1e-5)
    top = torch.topk(d.masked_embedding.centroids(h), da.centroid_intermediate_top_k, -1).indices
    clusters = d.masked_embedding.token_ordering.view(da.num_centroids, per)
    for r in range(3):
        assert set(torch.nonzero(finite[r]).flatten().tolist()) == set(clusters[top[r]].flatten().tolist())


# ---------------------------------------------------------------------------- speculative decoding


KV_CELLS = [("auto", "unit"), ("bfloat16", "unit"), ("fp8_e4m3", "unit"), ("fp8_e4m3", "calibrated")]


@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("kv,scales", KV_CELLS, ids=["fp32", "bf16", "fp8-unit", "fp8-calibrated"])
def test_greedy_speculative_is_token_identical_to_greedy(target, copy_drafter, mtp_prompts, kv, scales, block):
    """Speculative greedy == plain greedy of the target, for a batch of unequal lengths, with the
    selector's selection for the cell (draft groups included) at every kv block size."""
    sel = with_block(selection(f"kv_cache={kv}", f"kv_cache.scales={scales}"), block)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    if scales == "calibrated":
        s = eng.calibrate(mtp_prompts)
        assert max(max(v) for v in s.values()) < 0.05  # calibrated scales are far from 1
    plain = eng.generate(mtp_prompts, max_new_tokens=N_NEW)
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    res = sd.generate(mtp_prompts, max_new_tokens=N_NEW, record=True)
    assert res.tokens == plain.tokens
    st = res.stats
    assert 0 < st.accepted < st.proposed  # drafts were both accepted and rejected
    partial = [len(p) for seq in res.proposals for p in seq]
    assert max(partial) == K and st.rounds == len(partial)
    assert st.emitted == res.decode_tokens == sum(len(t) - 1 for t in res.tokens)
    assert res.target_passes < N_NEW - 1  # fewer target passes than plain decoding's steps
    if kv.startswith("fp8"):  # the default rules (vLLM 0.33.0) copy the target's scales into the drafts
        assert set(sd.scales_mode.values()) == {"copied_from_target"}


@pytest.mark.parametrize("bad, key", [
    (dict(prompts=[]), "prompts"), (dict(prompts=[[]]), "prompts"), (dict(prompts=[5]), "prompts"),
    (dict(max_new_tokens=0), "max_new_tokens=0"), (dict(max_new_tokens=-1), "max_new_tokens=-1"),
    (dict(max_new_tokens=2.5), "max_new_tokens=2.5"), (dict(max_new_tokens=True), "max_new_tokens=True"),
    (dict(temperature=-1.0), "temperature=-1.0"), (dict(temperature=float("nan")), "temperature=nan"),
    (dict(temperature="1"), "temperature='1'"), (dict(top_k=-3), "top_k=-3"), (dict(top_k=1.5), "top_k=1.5"),
    (dict(max_new_tokens=60), "max_seq_len=64"), (dict(prompts=[[2]] * 5), "max_seqs=4")])
def test_bad_generation_requests_are_refused_by_name(target, copy_drafter, bad, key):
    """Plain and speculative generation refuse the same requests, naming the setting and what is allowed, before
    anything runs. Before, max_new_tokens 0 or -1 gave one token, a negative temperature decoded greedily, and NaN or
    a negative top_k failed inside PyTorch."""
    sel = simple_selection(target.args, kv_block_size=16)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    req = dict(prompts=[[2, 3, 4, 5, 6, 7, 8]], max_new_tokens=4, temperature=1.0, top_k=0) | bad
    for gen in (eng.generate, sd.generate):
        with pytest.raises(ValueError, match=re.escape(key)):
            gen(req["prompts"], req["max_new_tokens"], temperature=req["temperature"], top_k=req["top_k"])
    assert len(eng.generate([[2, 3, 4]], np.int64(3), temperature=0, top_k=np.int32(0)).tokens[0]) == 3


def test_commit_bookkeeping_and_partial_acceptance(target, copy_drafter, mtp_prompts):
    """Every verify pass writes its k+1 tokens as pending and commits the accepted prefix: after each
    round a sequence's committed length is prompt + emitted - 1 (the last emitted token is not cached
    yet); rejected slots stay allocated; finished sequences release their blocks."""
    sel = simple_selection(target.args, kv_block_size=16)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    seen, partial = [], []
    orig = eng.commit

    def spy(seq, n):
        s = eng.sequences[seq]
        length, pending = s.length, s.pending
        orig(seq, n)
        assert eng.sequences[seq].length == length + n and eng.sequences[seq].written == length + pending
        seen.append((seq, length + n))
        if pending - n not in (0, 1):
            partial.append(pending - n)

    eng.commit = spy
    free0 = {k: len(g.free_blocks) for k, g in eng.cache.groups.items()}
    res = sd.generate(mtp_prompts, max_new_tokens=N_NEW)
    assert partial  # some rounds dropped rejected drafts
    last = {}
    for seq, length in seen:
        assert length >= last.get(seq, 0)
        last[seq] = length
    for s, p in enumerate(mtp_prompts):
        assert last[s] == len(p) + len(res.tokens[s]) - 1
    assert {k: len(g.free_blocks) for k, g in eng.cache.groups.items()} == free0  # all released
    with pytest.raises(ValueError, match="cannot roll"):
        eng.rollback(0, 10_000)
    eng.reset()
    sd.target_forward([0], [mtp_prompts[0]])
    sd.target_forward([0], [[5, 6, 7]], commit=False)
    n = len(mtp_prompts[0])
    assert (eng.seq_lens[0], eng.sequences[0].pending) == (n, 3)
    with pytest.raises(ValueError, match="cannot commit 4 tokens of sequence 0: it has 3 pending"):
        eng.commit(0, 4)
    eng.commit(0, 2)
    assert (eng.seq_lens[0], eng.sequences[0].written) == (n + 2, n + 3)
    eng.rollback(0, n)
    assert eng.seq_lens[0] == n


def test_eos_and_budget_truncation(target, copy_drafter, mtp_prompts):
    sel = simple_selection(target.args)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    plain = eng.generate(mtp_prompts, max_new_tokens=N_NEW, stop_at_eos=False)
    eos = plain.tokens[1][6]  # a token that the target emits mid-sequence: becomes the EOS
    want = eng.generate(mtp_prompts, max_new_tokens=N_NEW, eos_token_id=eos)
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    got = sd.generate(mtp_prompts, max_new_tokens=N_NEW, eos_token_id=eos)
    assert got.tokens == want.tokens and got.tokens[1][-1] == eos and len(got.tokens[1]) <= 7
    for n in (1, 3):
        assert sd.generate(mtp_prompts, max_new_tokens=n, stop_at_eos=False).tokens == \
            [t[:n] for t in plain.tokens]


def test_draft_layers_read_the_target_cache_through_the_draft_backend(target, copy_drafter, mtp_prompts):
    """Each draft layer calls its draft group's backend on the producer layer's cache tensors and the
    target's block tables, with seqused_k = the committed length, one query per sequence; the
    drafter never writes the cache."""
    sel = with_block(selection("kv_cache=fp8_e4m3", "kv_cache.scales=calibrated", "rules=post_pr52987", "overlay=[pr48666]"), 32)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    eng.calibrate(mtp_prompts)
    log = []

    class Spy:
        def __init__(self, inner, kind):
            self.inner, self.kind = inner, kind

        def forward(self, q, k, v, meta, params):
            log.append((self.kind, q.shape, k.data_ptr(), v.data_ptr(), meta, params))
            return self.inner.forward(q, k, v, meta, params)

    groups = draft_groups_of(sel, model_groups(sel))
    spies = {kind: Spy(make_backend(g), kind) for kind, g in groups.items()}
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=3, draft_backends=spies)
    assert sd.scales_mode == {SLIDING: "copied_from_target", FULL: "copied_from_target"}
    seqs = [0, 1, 2]
    logits, hidden = sd.target_forward(seqs, mtp_prompts)
    snapshot = {(k, i): (g.k[i].clone(), g.v[i].clone()) for k, g in eng.cache.groups.items() for i in g.producers}
    drafts, _, _ = sd.propose(seqs, [int(lg[-1].argmax()) for lg in logits], [h[-1] for h in hidden], [3, 1, 2])
    assert [len(d) for d in drafts] == [3, 1, 2]
    assert len(log) == 4 * 3  # 4 draft layers x 3 steps (sequence 1 drops out after one draft)
    steps = [[0, 1, 2], [0, 2], [0]]  # the sequences still drafting at each step
    for c, (kind, qshape, kptr, vptr, meta, params) in enumerate(log):
        act = steps[c // 4]
        gc = eng.cache.groups[kind]
        src = 3 if kind == SLIDING else 2
        assert kptr == gc.k[src].data_ptr() and vptr == gc.v[src].data_ptr()
        assert params.k_scale is gc.k_scale[src] and params.v_scale is gc.v_scale[src]  # copied scales
        assert params.softmax_scale == 1.0
        assert params.window_left == (target.args.sliding_window if kind == SLIDING else -1)
        assert qshape[0] == len(act) and meta.max_seqlen_q == 1 and meta.q_positions is None
        assert meta.cu_seqlens_q.tolist() == list(range(len(act) + 1))
        assert meta.seqused_k.tolist() == [len(mtp_prompts[s]) for s in act]  # committed: the prompt
        assert torch.equal(meta.block_table, gc.block_table(act))  # the target's own block tables
    for k, g in eng.cache.groups.items():
        for i in g.producers:
            assert torch.equal(g.k[i].view(torch.uint8), snapshot[(k, i)][0].view(torch.uint8))
            assert torch.equal(g.v[i].view(torch.uint8), snapshot[(k, i)][1].view(torch.uint8))


def test_mismatched_draft_backend_is_refused(target, copy_drafter):
    sel = simple_selection(target.args)
    eng = Engine(target, sel, EngineConfig(max_seqs=2, max_seq_len=32))
    groups = {k: g.model_copy(update=dict(draft=True, backend="TRITON_ATTN")) for k, g in model_groups(sel).items()}
    bad = sel.model_copy(update=dict(groups=tuple(sel.groups) + tuple(groups.values())))
    with pytest.raises(DrafterError, match="must use the target's backend"):
        SpeculativeDecoder(eng, copy_drafter, bad)


# ---------------------------------------------------------------------------- sampling


def test_rejection_sampling_preserves_the_target_distribution():
    """Statistical: the first emitted token ~ p0, and (first = d1, second) ~ p0(d1) p1."""
    g = torch.Generator().manual_seed(0)
    v, trials = 5, 3000
    p = torch.softmax(torch.randn(3, v, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(2, v, generator=g) * 1.5, -1)
    first = torch.zeros(v)
    second = torch.zeros(v)
    n_d1 = 0
    for _ in range(trials):
        d = [int(torch.multinomial(q[0], 1, generator=g)), int(torch.multinomial(q[1], 1, generator=g))]
        # p1/p2 are the target distributions *given* the drafts; here fixed per position
        toks, n = rejection_sample(p, q, d, g)
        assert 1 <= len(toks) <= 3 and n == len(toks) - 1 and toks[:n] == d[:n]
        first[toks[0]] += 1
        if n >= 1 and len(toks) >= 2:
            n_d1 += 1
            second[toks[1]] += 1
    assert torch.allclose(first / trials, p[0], atol=0.035)  # ~4 standard errors
    assert torch.allclose(second / second.sum(), p[1], atol=0.05)
    assert abs(n_d1 / trials - float((torch.minimum(p[0], q[0])).sum())) < 0.035  # P(accept d1)


def test_sampled_speculative_decoding_is_seeded(target, copy_drafter, mtp_prompts):
    sel = simple_selection(target.args)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    a = sd.generate(mtp_prompts, max_new_tokens=6, temperature=0.8, top_k=20, seed=11)
    b = sd.generate(mtp_prompts, max_new_tokens=6, temperature=0.8, top_k=20, seed=11)
    c = sd.generate(mtp_prompts, max_new_tokens=6, temperature=0.8, top_k=20, seed=12)
    assert a.tokens == b.tokens and a.tokens != c.tokens
    assert all(len(t) == 6 for t in a.tokens) and 0 < a.stats.proposed


def test_accept_greedy():
    lg = torch.full((4, 6), -1.0)
    for j, t in enumerate([2, 3, 5, 0]):
        lg[j, t] = 1.0
    assert accept_greedy(lg, [2, 3, 5]) == ([2, 3, 5, 0], 3)
    assert accept_greedy(lg, [2, 4, 5]) == ([2, 3], 1)
    assert accept_greedy(lg, [1, 3, 5]) == ([2], 0)
    assert accept_greedy(lg[:1], []) == ([2], 0)


# ---------------------------------------------------------------------------- FP8 draft scales


def _fp32_state(target, drafter, prompts):
    """Prefill on an fp32 cache: (engine, decoder, drafter inputs of one draft step)."""
    sel = selection()
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=1)
    logits, hidden = sd.target_forward(list(range(len(prompts))), prompts)
    return eng, sd, ([int(lg[-1].argmax()) for lg in logits], [h[-1] for h in hidden])


def _fp8_copy(target, drafter, sel, prompts, eng32):
    """The same cache contents as `eng32`'s, stored in FP8 with the calibrated scales."""
    from kselect.kernels.cache_ops import quantize

    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    eng.calibrate(prompts)
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=1)
    sd.target_forward(list(range(len(prompts))), prompts)  # lengths and blocks; the K/V are replaced below
    for kind, g in eng.cache.groups.items():
        src = eng32.cache.groups[kind]
        assert g.tables == src.tables  # same blocks: fresh allocators, same requests
        for i in g.producers:
            g.k[i].copy_(quantize(src.k[i], g.k_scale[i], g.dtype))
            g.v[i].copy_(quantize(src.v[i], g.v_scale[i], g.dtype))
    return eng, sd


def _one_draft_step(sd, inputs, n):
    _, _, lg = sd.propose(list(range(n)), *inputs, [1] * n, return_logits=True)
    return torch.cat(lg)


@pytest.mark.parametrize("k_gain", [1.0, 3000.0], ids=["scales<<1", "k_scale>>1"])
def test_calibrated_fp8_draft_scales(target, random_drafter, mtp_prompts, k_gain):
    """The PR #48666 / #49262 bug, reproduced: on a calibrated FP8 target cache the draft layers must
    dequantize with the target layer's K/V scales. With copied scales the draft logits match the
    draft logits over an fp32 cache within FP8 error (the target's own FP8 error sets the bar);
    with the drafter's unit scales they are far off. The selector warns exactly in that case."""
    if k_gain != 1.0:
        # An equivalent model with large K: k_norm x g on the producers (2, 3) and q_norm / g on every
        # layer that reads them (target 2-5, all draft layers): fp32 attention logits are unchanged,
        # but the cached K is g times larger, so the calibrated k_scale = amax/448 >> 1.
        import copy as _copy

        target, random_drafter = _copy.deepcopy(target), _copy.deepcopy(random_drafter)
        with torch.no_grad():
            for i in (2, 3):
                target.layers[i].self_attn.k_norm.weight.mul_(k_gain)
            for i in (2, 3, 4, 5):
                target.layers[i].self_attn.q_norm.weight.div_(k_gain)
            for layer in random_drafter.model.layers:
                layer.self_attn.q_norm.weight.div_(k_gain)
    base = ["rules=post_pr52987", "kv_cache=fp8_e4m3", "kv_cache.scales=calibrated"]  # the seed's #48666 story
    unit_sel, pr_sel, pin_sel = selection(*base), selection(*base, "overlay=[pr48666]"), \
        selection(*base, "spec_decode.copy_target_kv_scales=true")
    n = len(mtp_prompts)
    eng32, sd32, inputs = _fp32_state(target, random_drafter, mtp_prompts)
    ref = _one_draft_step(sd32, inputs, n)
    eng_c, sd_c = _fp8_copy(target, random_drafter, pr_sel, mtp_prompts, eng32)
    eng_u, sd_u = _fp8_copy(target, random_drafter, unit_sel, mtp_prompts, eng32)
    copied, unit = _one_draft_step(sd_c, inputs, n), _one_draft_step(sd_u, inputs, n)
    scales = eng_c.cache.scales()
    ks = [scales[i][0] for i in (2, 3)]
    if k_gain == 1.0:
        assert max(max(v) for v in scales.values()) < 0.05
    else:
        assert min(ks) > 5.0
    assert set(sd_c.scales_mode.values()) == {"copied_from_target"}
    assert set(sd_u.scales_mode.values()) == {"unit"}
    err_copied, err_unit = rel_err(copied, ref), rel_err(unit, ref)
    print(f"k_gain={k_gain}: k_scales={ks} draft copied {err_copied:.3f} unit {err_unit:.3f}")
    assert err_copied <= FP8_DRAFT_TOL, (
        f"copied target scales should match the fp32-cache drafter within FP8 error: {err_copied:.3f}")
    assert err_unit > max(4 * err_copied, 0.3), (
        f"bug not reproduced: unit draft scales on a calibrated FP8 cache should be far off "
        f"(unit {err_unit:.3f} vs copied {err_copied:.3f})")

    # the selector's warning for this cell: present exactly when the draft scales are not copied
    warn = "mtp-unit_scales_on_calibrated_fp8"
    for sel, copied_ in ((unit_sel, False), (pr_sel, True), (pin_sel, True),
                         (selection(*base, "overlay=[pr48666]", "spec_decode.copy_target_kv_scales=false"), False)):
        for g in sel.groups:
            if g.draft:
                assert (g.kv_scales == "copied_from_target") == copied_
                assert any(w.rule == warn for w in g.warnings) == (not copied_)
            else:
                assert not any(w.rule == warn for w in g.warnings)
    for sel in (selection("kv_cache=fp8_e4m3", "kv_cache.scales=unit"), selection()):
        assert not any(w.rule == warn for g in sel.groups for w in g.warnings)  # unit FP8 / bf16: unaffected


def test_unit_fp8_cache_is_unaffected_by_the_scale_choice(target, random_drafter, mtp_prompts):
    """Plain `fp8` (unit target scales): copying the target's scales changes nothing."""
    sel = selection("kv_cache=fp8_e4m3", "kv_cache.scales=unit")
    out = []
    for copy in (False, True):
        eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
        sd = SpeculativeDecoder(eng, random_drafter, sel, copy_scales=copy)
        logits, hidden = sd.target_forward([0, 1, 2], mtp_prompts)
        inputs = ([int(lg[-1].argmax()) for lg in logits], [h[-1] for h in hidden])
        out.append(_one_draft_step(sd, inputs, 3))
    assert torch.equal(out[0], out[1]) and math.isfinite(float(out[0].abs().max()))


@pytest.mark.parametrize("chunk", [None, 11], ids=["whole-prefill", "chunked-prefill"])
def test_greedy_speculative_with_image_spans(target, copy_drafter, mtp_prompts, chunk):
    """Vision mode: the prompt pass attends bidirectionally inside image spans (also when the prompt is
    prefilled in chunks that never cut a span), so speculative greedy == plain greedy with the same
    spans, and differs from a text-only run."""
    spans = [[(1, 6), (9, 20)], [], [(2, 9)]]  # (9, 20) is as long as a chunk: prompt 0 cuts at 9 and 20
    sel = simple_selection(target.args, kv_block_size=16)
    plain = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64)).generate(mtp_prompts, max_new_tokens=N_NEW,
                                                                     mm_spans=spans)
    text = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64)).generate(mtp_prompts, max_new_tokens=N_NEW)
    assert plain.tokens != text.tokens  # the spans change the output
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64, max_step_tokens=chunk))
    sd = SpeculativeDecoder(eng, copy_drafter, sel, num_speculative_tokens=K)
    assert sd.generate(mtp_prompts, max_new_tokens=N_NEW, mm_spans=spans).tokens == plain.tokens
