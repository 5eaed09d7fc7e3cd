"""Repo-wide pytest setup: kselect's plugin (the `kselect_matrix` marker, the `kselect_cell`
fixture, `--kselect-matrix`; see selector/review/pytest_plugin.py) and pytester for its own tests."""

import os

import pytest
import torch

# Without a GPU our Triton kernels run in Triton's CPU interpreter. Triton reads TRITON_INTERPRET
# when a @triton.jit function is defined, so set it here, before any test module imports kernels/.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["kselect.selector.review.pytest_plugin", "pytester"]


@pytest.fixture(scope="session", autouse=True)
def _kselect_user_cache(tmp_path_factory):
    """kselect's user cache (selector/base/cache.py) in a folder of this test session, for the commands the
    tests spawn too: the tests never read or fill the user's own."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    mp.undo()


@pytest.fixture
def fake_flash_attn(monkeypatch):
    """FA3/FA4/fork kernel calls emulated on the fp32 reference with FlashAttention's own semantics
    (bottom-right aligned queries, causal flag, (left, right) window; no mm-prefix argument), so the
    FLASH_ATTN adapters run on CPU. Tests the adapters, not the kernels (those run on the H200:
    tests/kernels/test_gpu_paths.py). Returns the list of `causal` flags of every kernel call."""
    from kselect.kernels import flash_attn as fa
    from kselect.kernels import flash_attn_loader as loader
    from kselect.kernels.reference import paged_attention

    calls = []

    def emulate(q, kc, vc, cu, used, bt, max_q, max_k, scale, *, causal=True, window_left=-1, sinks=None,
                q_descale=None, k_descale=None, v_descale=None, out_dtype=None, num_splits=1, build=None):
        calls.append(causal)
        return paged_attention(q, kc, vc, cu, used, bt, scale, causal=causal, window_left=window_left, sinks=sinks,
                               q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype)

    for name in ("fa3_forward", "fa4_forward", "fa4_fork_forward"):
        monkeypatch.setattr(fa, name, emulate)
    for name in ("load_fa4_upstream", "load_fa4_fork"):
        monkeypatch.setattr(loader, name, lambda: None)
    monkeypatch.setattr(loader, "load_fa3", lambda: loader.Fa3Build("vllm", None))
    return calls
