"""Our MTP drafter + speculative loop against HF transformers' assisted generation (fp32, eager).

`target.generate(ids, assistant_model=asst, do_sample=False)` with a `Gemma4AssistantForCausalLM`
carrying our drafter's weights proposes candidates in `SinglePositionMultiTokenCandidateGenerator.
get_candidates`; we capture them per round and compare with the drafts our decoder proposes for
the same prompts (ours batched, HF one prompt at a time: it only supports batch 1).

HF's drafter reads the `shared_kv_states` of the last verification pass, rejected drafts included
(see `DraftKVBinding`); `kv_view="hf"` reproduces those reads from the rejected slots still in our
paged cache, and then every round's drafts are identical. Our default view (`committed`, accepted
tokens only) agrees with HF on the first round and after rounds where every draft was accepted.
"""

from __future__ import annotations

import copy

import pytest
import torch

from g4_helpers import EMBED_STD, hf_twin, make_args
from kselect.gemma4.checkpoint import build_random, hf_state_dict
from kselect.gemma4.config import DrafterArgs
from kselect.gemma4.drafter_init import build_random_drafter
from kselect.gemma4.engine import Engine, EngineConfig
from g4_helpers import simple_selection  # noqa: E402
from kselect.gemma4.speculative import SpeculativeDecoder

S, F = "sliding_attention", "full_attention"
DRAFTER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
               layer_types=[S, S, S, F], num_centroids=32, centroid_intermediate_top_k=4)
N_NEW, K = 10, 4


def _kv_sharing_modes(cfg) -> list[str | None]:
    """Gemma-4 sharing modes as gemma4/config.py documents them (Gemma4Args's kv-sharing modes): the last `num_kv_shared_layers`
    layers 'reuse'; the last non-shared layer of each type 'store' (also without sharing: the
    drafter reads it); an assistant (every layer shared) is all 'reuse'."""
    n = cfg.num_hidden_layers
    first = n - (cfg.num_kv_shared_layers or 0)
    modes: list[str | None] = [None] * first + ["reuse"] * (n - first)
    for t in set(cfg.layer_types[:first]):
        modes[max(i for i in range(first) if cfg.layer_types[i] == t)] = "store"
    return modes


@pytest.fixture(scope="module")
def hf_sharing_fix():
    """transformers 5.23 (the pinned < 5.24) cannot build an all-shared assistant and marks no 'store'
    layer in a target without KV sharing (5.24 fixed both); patch the property while this module runs."""
    from transformers.models.gemma4 import configuration_gemma4 as c4

    orig = c4.Gemma4TextConfig.kv_sharing_modes
    try:
        probe = c4.Gemma4TextConfig(num_hidden_layers=2, layer_types=[S, F], num_kv_shared_layers=2,
                                    hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)
        needed = probe.kv_sharing_modes != ["reuse", "reuse"]
    except ValueError:
        needed = True
    if needed:
        c4.Gemma4TextConfig.kv_sharing_modes = property(_kv_sharing_modes)
    yield
    c4.Gemma4TextConfig.kv_sharing_modes = orig


@pytest.fixture(scope="module")
def prompts3():
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(3, 512, (n,), generator=g).tolist() for n in (23, 11, 17)]  # > window 8


def hf_assistant(drafter):
    from transformers import Gemma4AssistantForCausalLM

    asst = Gemma4AssistantForCausalLM(copy.deepcopy(drafter.args.to_hf_config()))
    asst.config.get_text_config()._attn_implementation = "eager"
    res = asst.load_state_dict(hf_state_dict(drafter), strict=True)
    assert not res.missing_keys and not res.unexpected_keys
    asst.eval()
    asst.generation_config.num_assistant_tokens = K
    asst.generation_config.num_assistant_tokens_schedule = "constant"
    return asst


def hf_assisted(hf, asst, prompts, monkeypatch):
    """HF assisted greedy generation per prompt: (tokens, candidates per round)."""
    from transformers.generation import candidate_generator as cg

    rounds: list[list[int]] = []
    orig = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates

    def spy(self, input_ids, *a, **kw):
        ids, logits = orig(self, input_ids, *a, **kw)
        if logits is not None:
            rounds.append(ids[0, input_ids.shape[1]:].tolist())
        return ids, logits

    monkeypatch.setattr(cg.SinglePositionMultiTokenCandidateGenerator, "get_candidates", spy)
    toks, cands = [], []
    for p in prompts:
        rounds.clear()
        ids = torch.tensor([p])
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=asst, do_sample=False,
                              max_new_tokens=N_NEW)
        toks.append(out[0, len(p):].tolist())
        cands.append(list(rounds))
    monkeypatch.undo()
    return toks, cands


# no-sharing target (26B/31B-like) with a drafter whose drafts are all rejected (stale reads every
# round); the all-features target with the copy drafter (full, partial and no acceptance); the
# edge target with the centroid-masked head (E2B/E4B drafters).
CASES = [("large", "random", False), ("all", "copy", False), ("edge", "random", True)]


@pytest.mark.parametrize("name,init,ordered", CASES, ids=[f"{n}-{i}{'-ordered' if o else ''}" for n, i, o in CASES])
def test_draft_tokens_match_hf_assisted_generation(hf_sharing_fix, prompts3, monkeypatch, name, init, ordered):
    target = build_random(make_args(name), seed=12, embed_std=EMBED_STD)
    hf = hf_twin(target)
    dargs = DrafterArgs.from_preset(target.args, {**DRAFTER, "use_ordered_embeddings": ordered})
    drafter = build_random_drafter(dargs, seed=3, copy_from=target.embed_tokens.weight if init == "copy" else None)
    hf_toks, hf_cands = hf_assisted(hf, hf_assistant(drafter), prompts3, monkeypatch)

    sel = simple_selection(target.args, kv_block_size=16)
    eng = Engine(target, sel, EngineConfig(max_seqs=4, max_seq_len=64))
    res = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=K, kv_view="hf").generate(
        prompts3, max_new_tokens=N_NEW, record=True)
    assert res.tokens == hf_toks  # = greedy (HF's assisted greedy equals its plain greedy; no EOS here)
    ours = [[r for r in seq if r] for seq in res.proposals]  # HF skips rounds without drafts
    for s in range(len(prompts3)):
        assert ours[s] == hf_cands[s], f"sequence {s}: draft tokens differ from HF's candidates"
    st = res.stats
    assert sum(map(len, hf_cands)) >= 2 * len(prompts3)
    if init == "copy":
        assert 0 < st.accepted < st.proposed and any(0 < a < p for a, p in zip(st.accepted_at, st.proposed_at))
    else:
        assert st.accepted < st.proposed // 4
    # the default view reads only accepted tokens: same first round as HF's, and still token-identical
    com = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=K).generate(
        prompts3, max_new_tokens=N_NEW, record=True)
    assert com.tokens == hf_toks
    assert [seq[0] for seq in com.proposals] == [c[0] for c in hf_cands]


@pytest.mark.parametrize("ordered", [False, True])
def test_loads_an_hf_save_pretrained_assistant(hf_sharing_fix, tmp_path, ordered):
    """A folder written by HF's `Gemma4AssistantForCausalLM.save_pretrained` (its config.json and
    safetensors names) loads into our drafter with identical weights and config."""
    from kselect.gemma4.checkpoint import load_drafter

    target = build_random(make_args("all"), seed=12, embed_std=EMBED_STD)
    dargs = DrafterArgs.from_preset(target.args, {**DRAFTER, "use_ordered_embeddings": ordered})
    drafter = build_random_drafter(dargs, seed=4)
    asst = hf_assistant(drafter)
    asst.save_pretrained(tmp_path / "asst")
    loaded = load_drafter(tmp_path / "asst", target.args)
    assert loaded.args.to_dict() == {**dargs.to_dict(), "dtype": loaded.args.dtype}
    for k, v in drafter.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
