"""Gemma-4 vision mode (HF `use_bidirectional_attention="vision"`): image spans attend bidirectionally.

Reference: HF `Gemma4ForConditionalGeneration` (no vision/audio tower, fp32, eager) fed
`mm_token_type_ids`; HF embeds image slots as the pad token, so our engine gets pad ids there.
HF's rule: full-attention layers stay causal; sliding layers see key k from query q iff
k > q - W and (k <= q or both in one image span) -- the window bounds the past side only, so a
span longer than the window reaches further ahead than W; every backend's window does the same.
"""

import copy
import pathlib
import subprocess
import sys

import pytest
import torch

from g4_helpers import EMBED_STD, HF_RTOL, make_args
from kselect.gemma4.checkpoint import build_random
from kselect.gemma4.engine import Engine, EngineConfig, MultimodalUnsupportedError, max_rel_error
from g4_helpers import simple_selection  # noqa: E402

W = 8  # sliding window of the tiny configs
# seq 0: a span shorter than the window and one longer; seq 1: text only; seq 2: one long span
SPANS = [[(2, 7), (9, 22)], [], [(4, 17)]]
LENS = (24, 11, 20)
N_DECODE = 3


@pytest.fixture(scope="module")
def mm():
    """(our model, HF Gemma4ForConditionalGeneration twin without towers, config)."""
    from transformers import AutoModelForImageTextToText, Gemma4Config

    model = build_random(make_args("all"), seed=21, embed_std=EMBED_STD)
    tc = model.args.to_hf_text_config()
    tc.use_bidirectional_attention = "vision"
    cfg = Gemma4Config(text_config=tc.to_dict(), vision_config=None, audio_config=None)
    hf = AutoModelForImageTextToText.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    res = hf.load_state_dict({f"model.language_model.{k}": v for k, v in model.state_dict().items()}, strict=False)
    assert res.unexpected_keys == [] and res.missing_keys == ["lm_head.weight"], res
    assert hf.config.get_text_config().use_bidirectional_attention == "vision"
    return model, hf, cfg


@pytest.fixture(scope="module")
def batch():
    """Prompts (pad ids in the image slots), their continuations."""
    g = torch.Generator().manual_seed(99)
    prompts = []
    for n, spans in zip(LENS, SPANS):
        p = torch.randint(3, 512, (n,), generator=g).tolist()
        for a, e in spans:
            p[a:e] = [0] * (e - a)
        prompts.append(p)
    cont = [torch.randint(3, 512, (N_DECODE,), generator=g).tolist() for _ in prompts]
    return prompts, cont


def hf_logits(hf, cfg, tokens, spans, *, vision=True):
    ids = torch.tensor([tokens])
    tt = torch.zeros_like(ids)
    for a, e in spans:
        ids[0, a:e] = cfg.image_token_id
        tt[0, a:e] = 1
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=tt if vision else None)
    return out.logits[0].float()


def run_engine(model, prompts, cont, backend="TORCH_REFERENCE", spans=SPANS):
    eng = Engine(model, simple_selection(model.args, backend=backend, kv_block_size=8),
                 EngineConfig(max_seqs=4, max_seq_len=48))
    seqs = list(range(len(prompts)))
    got = {s: [x] for s, x in zip(seqs, eng.extend(seqs, prompts, all_logits=True, mm_spans=spans))}
    for step in range(N_DECODE):
        lg = eng.decode(seqs, [c[step] for c in cont])
        for s in seqs:
            got[s].append(lg[s:s + 1])
    return [torch.cat(got[s]) for s in seqs]


def test_spans_cover_both_sides_of_the_window():
    lens = [e - a for sp in SPANS for a, e in sp]
    assert min(lens) < W < max(lens)


def test_prefill_and_decode_match_hf_vision_mask(mm, batch):
    model, hf, cfg = mm
    prompts, cont = batch
    ours = run_engine(model, prompts, cont)
    causal = run_engine(model, prompts, cont, spans=None)
    for p, c, sp, got, plain in zip(prompts, cont, SPANS, ours, causal):
        ref = hf_logits(hf, cfg, p + c, sp)
        assert got.shape == ref.shape == (len(p) + N_DECODE, 512)
        assert max_rel_error(got, ref) < HF_RTOL
        assert max_rel_error(got[len(p):], ref[len(p):]) < HF_RTOL  # decode steps alone
        # without spans we are HF's causal model; the vision mask really changes the logits
        assert max_rel_error(plain, hf_logits(hf, cfg, p + c, sp, vision=False)) < HF_RTOL
        if sp:
            assert max_rel_error(got, plain) > 1e-2
        else:
            assert max_rel_error(got, plain) < HF_RTOL  # a text-only row is unaffected


def test_long_span_needs_past_only_window(mm, batch, monkeypatch):
    """The far-ahead span keys (q + W <= k < end) are visible, as in HF: the backends' window bounds the
    past side only (kernels/reference.py). A window bounding both sides would differ from HF on the
    long-span sequences, so these spans really exercise it."""
    model, hf, cfg = mm
    prompts, cont = batch
    from kselect.kernels import reference

    ours = run_engine(model, prompts, cont)
    past_only = reference.visibility_mask

    def both_sides(q_pos, kv_len, *, causal, window_left, spans):
        ok = past_only(q_pos, kv_len, causal=causal, window_left=window_left, spans=spans)
        if window_left >= 0:
            ok &= torch.arange(kv_len)[None, :] - q_pos[:, None] <= window_left
        return ok

    monkeypatch.setattr(reference, "visibility_mask", both_sides)
    sym = run_engine(model, prompts, cont)
    for s in (0, 2):
        ref = hf_logits(hf, cfg, prompts[s] + cont[s], SPANS[s])
        assert max_rel_error(ours[s], ref) < HF_RTOL < max_rel_error(sym[s], ref)


def test_triton_backend_matches_hf(mm, batch):
    pytest.importorskip("triton")
    model, hf, cfg = mm
    prompts, cont = batch
    ours = run_engine(model, prompts, cont, backend="TRITON_ATTN")
    for p, c, sp, got in zip(prompts, cont, SPANS, ours):
        assert max_rel_error(got, hf_logits(hf, cfg, p + c, sp)) < 1e-3


def test_flash_attn_adapter_matches_hf(mm, batch, fake_flash_attn):
    """FLASH_ATTN v4's span pass (emulated kernels): HF's vision mask, and no second pass in decode steps."""
    from kselect.backends.flash_attn import FlashAttn4Backend
    from kselect.gemma4.engine import model_groups

    model, hf, cfg = mm
    prompts, cont = batch
    sel = simple_selection(model.args, kv_block_size=8)
    backends = {k: FlashAttn4Backend(g.model_copy(update=dict(backend="FLASH_ATTN", flash_attn_version=4)))
                for k, g in model_groups(sel).items()}
    eng = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=48), backends=backends)
    seqs = list(range(len(prompts)))
    got = {s: [x] for s, x in zip(seqs, eng.extend(seqs, prompts, all_logits=True, mm_spans=SPANS))}
    span_passes = fake_flash_attn.count(False)
    assert span_passes == len(model.args.layers_of("sliding_attention")) > 0  # once per sliding layer
    for step in range(N_DECODE):
        lg = eng.decode(seqs, [c[step] for c in cont])
        for s in seqs:
            got[s].append(lg[s:s + 1])
    assert fake_flash_attn.count(False) == span_passes  # decode steps lie after every span
    for p, c, sp, s in zip(prompts, cont, SPANS, seqs):
        assert max_rel_error(torch.cat(got[s]), hf_logits(hf, cfg, p + c, sp)) < HF_RTOL


def test_backend_without_mm_prefix_fails_loudly(mm, batch):
    model, _, _ = mm
    prompts, _ = batch

    class NoMM:
        def __init__(self, inner):
            self.inner = inner

        def forward(self, q, k, v, meta, layer):
            if meta.mm_prefix is not None:
                raise NotImplementedError("FLASH_ATTN v3: mm_prefix spans are not wired")
            return self.inner.forward(q, k, v, meta, layer)

        def supports_cuda_graphs(self):
            return False

    from kselect.backends.registry import make_backend
    from kselect.gemma4.engine import model_groups

    sel = simple_selection(model.args)
    backends = {k: NoMM(make_backend(g)) for k, g in model_groups(sel).items()}
    eng = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=48), backends=backends)
    eng.extend([1], [prompts[1]])  # text only: fine
    with pytest.raises(MultimodalUnsupportedError, match="mm-prefix"):
        eng.extend([0], [prompts[0]], mm_spans=[SPANS[0]])
    with pytest.raises(ValueError, match="inside the tokens of this step"):
        eng.extend([2], [prompts[2][:10]], mm_spans=[SPANS[2]])  # a span cut by the chunk


def test_main_job_multimodal_runs():
    out = subprocess.run([sys.executable, "-m", "kselect", "run", "model.multimodal=true", "--max-new-tokens", "4"],
                         capture_output=True, text=True, timeout=120, cwd=str(pathlib.Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "placeholder image tokens" in out.stdout and "image span [1, 21)" in out.stdout
    assert "numerics: not checked: every group runs TORCH_REFERENCE, the reference itself" in out.stdout
