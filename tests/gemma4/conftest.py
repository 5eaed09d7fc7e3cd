"""Fixtures for the gemma4 tests: tiny models (ours + HF twins) built once per session, and CUDA graphs
emulated on CPU."""

import contextlib
import sys
import time
from types import SimpleNamespace

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


# ---------------------------------------------------------------------------- graph decode, emulated
class _FakeGraph:
    """Stands in for torch.cuda.CUDAGraph on CPU: replay re-runs the captured step's `_run` into its
    static output, so any stale device-side state (ids, positions, lengths, slots) shows."""

    def __init__(self):
        self.dg = None

    def replay(self):
        got = self.dg._run()
        for dst, src in zip(*((self.dg.out, got) if isinstance(got, tuple) else ((self.dg.out,), (got,)))):
            dst.copy_(src)


class _FakeCapture:
    def __init__(self, g):
        self.g = g

    def __enter__(self):
        self.g.dg = sys._getframe(1).f_locals["self"]  # the step being captured (CapturedStep.capture)

    def __exit__(self, *exc):
        return False


class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


@pytest.fixture
def fake_cuda_graphs(monkeypatch):
    stream = SimpleNamespace(wait_stream=lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _FakeCapture)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: stream)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
