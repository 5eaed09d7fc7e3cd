"""Speculative decoding as captured draft + verify steps (gemma4/graphs.py).

On CPU the CUDA graphs are emulated (conftest.py `fake_cuda_graphs`: a replay re-runs the captured
step from its static buffers), so stale buffers, a wrong device-side token hand-off or block tables
not reloaded after sliding-window trimming show as different tokens. On a GPU the real graphs run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from g4_helpers import simple_selection
from kselect.gemma4.checkpoint import build_random
from kselect.gemma4.config import DrafterArgs, Gemma4Args
from kselect.gemma4.drafter_init import build_random_drafter
from kselect.gemma4.engine import Engine, EngineConfig
from kselect.gemma4.speculative import SpeculativeDecoder

ROOT = Path(__file__).resolve().parents[2]
PRESET = yaml.safe_load((ROOT / "conf/model/gemma4_tiny.yaml").read_text())


@pytest.fixture(scope="module")
def pair():
    target = build_random(Gemma4Args.from_model_config(PRESET), seed=0, embed_std=0.07)
    drafter = build_random_drafter(DrafterArgs.from_preset(target.args, PRESET["drafter"]), seed=3,
                                   copy_from=target.embed_tokens.weight)
    return target, drafter


def _prompts(lens, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 512, (n,), generator=g).tolist() for n in lens]


@pytest.mark.parametrize("step", [None, 6], ids=["whole-prefill", "windowed-cache"])
def test_graph_rounds_equal_eager_rounds(pair, fake_cuda_graphs, step):
    """Captured rounds give the eager rounds' tokens, acceptance and commits (plain greedy's tokens);
    with a small max_step_tokens the sliding group gives blocks back between draft and verify."""
    target, drafter = pair
    sel = simple_selection(target.args, kv_block_size=8)
    prompts = _prompts((21, 9, 14))
    plain = Engine(target, sel, EngineConfig(max_seqs=3, max_seq_len=64)).generate(prompts, max_new_tokens=20)
    eager_eng = Engine(target, sel, EngineConfig(max_seqs=3, max_seq_len=64, max_step_tokens=step))
    eager = SpeculativeDecoder(eager_eng, drafter, sel, num_speculative_tokens=4).generate(
        prompts, max_new_tokens=20, record=True)
    eng = Engine(target, sel, EngineConfig(max_seqs=3, max_seq_len=64, max_step_tokens=step))
    eng.use_graphs = True  # the emulated graphs on CPU
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=4)
    for _ in range(2):  # the second run replays the graphs captured by the first
        got = sd.generate(prompts, max_new_tokens=20, record=True)
        assert got.tokens == plain.tokens == eager.tokens
        assert got.proposals == eager.proposals and got.stats.to_dict() == eager.stats.to_dict()
        assert got.cuda_graphs and got.graph_rounds == got.target_passes and not got.notes  # every round
        assert 0 < got.stats.accepted < got.stats.proposed
    assert {b for b, _ in sd.graphs._graphs} >= {3}  # batch sizes captured as sequences finished


def test_failed_capture_falls_back_to_eager_rounds(pair, fake_cuda_graphs, monkeypatch):
    target, drafter = pair
    sel = simple_selection(target.args, kv_block_size=8)
    prompts = _prompts((12, 17))
    plain = Engine(target, sel, EngineConfig(max_seqs=2, max_seq_len=48)).generate(prompts, max_new_tokens=12)
    eng = Engine(target, sel, EngineConfig(max_seqs=2, max_seq_len=48))
    eng.use_graphs = True
    from kselect.gemma4 import graphs

    def broken(self):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs.VerifyGraph, "_run", broken)
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=3)
    with pytest.warns(UserWarning, match="CUDA graph speculative decoding disabled"):
        got = sd.generate(prompts, max_new_tokens=12)
    assert got.tokens == plain.tokens and got.graph_rounds == 0
    assert any("stream is capturing" in n for n in got.notes)
    assert eng.use_graphs  # plain decoding keeps its graphs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_speculative_greedy_equals_plain_greedy():
    """Real CUDA graphs, the machine's selection for the bundled tiny model with MTP: speculative
    greedy == plain greedy over 40 tokens for a batch that crosses the window and finishes unevenly."""
    from kselect.gemma4.build import build_model, select
    from kselect.gemma4.build import build_drafters

    cfg, sel = select(["spec_decode=mtp"])
    model, _, _ = build_model(cfg, seed=0)
    (_, drafter), = build_drafters(cfg, model, seed=1, inits=("copy",))
    prompts = [[2] + list(range(10, 10 + n)) for n in (5, 17, 30)]
    plain = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=128, cuda_graphs=True))
    if not plain.use_graphs:
        pytest.skip("the selected backends do not support CUDA graphs")
    want = plain.generate(prompts, 40)
    eng = Engine(model, sel, EngineConfig(max_seqs=4, max_seq_len=128, cuda_graphs=True))
    sd = SpeculativeDecoder(eng, drafter, sel, num_speculative_tokens=4)
    for _ in range(2):
        got = sd.generate(prompts, 40)
        assert got.tokens == want.tokens
        assert got.graph_rounds == got.target_passes and not got.notes
