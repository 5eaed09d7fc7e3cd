"""Fixtures for the gemma4 tests: tiny models (ours + HF twins) built once per session."""

import sys

import pytest  # noqa: E402
import torch  # noqa: E402

from g4_helpers import CONFIGS, EMBED_STD, hf_twin, make_args  # noqa: E402
from kselect.gemma4.checkpoint import build_random  # noqa: E402


@pytest.fixture(scope="session")
def models():
    """{name: (our model, HF twin)} built once per test session."""
    out = {}
    for i, name in enumerate(CONFIGS):
        m = build_random(make_args(name), seed=10 + i, embed_std=EMBED_STD)
        out[name] = (m, hf_twin(m))
    return out


@pytest.fixture(scope="session")
def prompts():
    """Three prompts of unequal length, longer than the sliding window (8)."""
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(3, 512, (n,), generator=g).tolist() for n in (23, 11, 17)]



@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The tiny models gain nothing from intra-op threads, and OpenMP spin-waits make them 10x
    slower when the 2 CI cores are shared: run the gemma4 tests single-threaded (restored after).
    Session-scoped, so that session and module fixtures (reference logits) are computed with the
    same thread count, hence the same reduction order, as the tests that compare against them."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
