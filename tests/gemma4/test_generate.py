"""gemma4/generate.py's pieces that both step strategies share (no model needed): the stopping rule and the
engine's config value."""

import dataclasses

import pytest

from kselect.gemma4.engine_config import EngineConfig
from kselect.gemma4.generate import Outputs, Request

EOS = 2


def request(max_new_tokens: int, stop_at_eos: bool = True) -> Request:
    return Request(prompts=[[1], [1]], max_new_tokens=max_new_tokens, temperature=0.0, top_k=0, eos=EOS,
                   stop_at_eos=stop_at_eos, generator=None)


def test_a_sequence_keeps_up_to_its_eos_and_its_budget():
    out = Outputs(request(4), [5, 6])
    assert out.tokens == [[5], [6]] and out.done == [False, False]
    assert out.add(0, [7, EOS, 9]) == [7, EOS]  # nothing after EOS
    assert out.add(1, [8, 8, 8, 8]) == [8, 8, 8]  # the budget: 4 tokens in all
    assert out.tokens == [[5, 7, EOS], [6, 8, 8, 8]] and out.done == [True, True]


def test_without_stop_at_eos_only_the_budget_ends_a_sequence():
    out = Outputs(request(3, stop_at_eos=False), [EOS, 6])
    assert out.done == [False, False]
    assert out.add(0, [EOS, 4]) == [EOS, 4] and out.done[0]


def test_a_first_token_can_finish_a_sequence():
    assert Outputs(request(1), [5, 6]).done == [True, True]  # a budget of one token
    assert Outputs(request(8), [EOS, 6]).done == [True, False]


def test_engine_config_is_a_frozen_checked_value():
    cfg = EngineConfig(max_seqs=2, max_step_tokens=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_seqs = 3
    assert dataclasses.replace(cfg, max_seqs=3) == EngineConfig(max_seqs=3, max_step_tokens=4)
    with pytest.raises(ValueError, match="max_step_tokens"):
        EngineConfig(max_step_tokens=0)
