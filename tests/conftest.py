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


def _interpreter_patches_each_language_once():
    """Triton's interpreter re-patches triton.language for every @triton.jit helper a kernel calls
    (`InterpretedFunction.__call__` -> `_patch_lang`, an inspect.getmembers walk of the language modules each time).
    A call
    finding every language module of its function already patched (by the launch around it, or by an earlier
    helper's patch, which Triton never restores) skips the walk; any other call patches as before. The check reads
    the attribute `_patch_lang_core` sets (`multiple_of`, a functools.partial); where Triton's layout differs this
    does nothing; tests/kernels/test_interpreter_patch.py checks both. Measured: tests/kernels and tests/gemma4 with
    -n 2 in 169 s, against 213 s with Triton's own behaviour (KSELECT_TEST_TRITON_REPATCH=1 restores it)."""
    import functools
    import inspect

    try:
        import triton.language as tl
        from triton.runtime import interpreter as ti
    except ImportError:
        return
    original = getattr(ti, "_patch_lang", None)
    if original is None or not hasattr(ti, "_LangPatchScope") or getattr(original, "kselect_once", False):
        return

    def patched(lang) -> bool:
        return isinstance(getattr(lang, "multiple_of", None), functools.partial)

    def patch_lang(fn):
        langs = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        if langs and all(patched(lang) for lang in langs):
            return ti._LangPatchScope()  # nothing set, nothing to restore
        return patch_lang.original(fn)

    patch_lang.kselect_once, patch_lang.original = True, original
    ti._patch_lang = patch_lang


if os.environ.get("TRITON_INTERPRET") == "1" and not os.environ.get("KSELECT_TEST_TRITON_REPATCH"):
    _interpreter_patches_each_language_once()


def _hydra_parses_each_conf_file_once():
    """Hydra parses every conf/ file a compose reads again at each compose (a new config repository each time):
    about half of an uncached in-process compose (test_fuzz.py's select-values-0: 7.7 -> 3.8 s). Keep each parse,
    keyed by the file's path and exact bytes, and hand Hydra a fresh copy (it edits what it loads; unpickling is
    ~25x faster than parsing), so an edited or new file parses afresh and a file that fails to parse fails every
    time. Hydra's plugin scan re-executes the module defining FileConfigSource, so the class the registry resolves
    is patched, when resolved. tests/selector/test_hydra_parse_memo.py checks it; KSELECT_TEST_HYDRA_REPARSE=1
    restores Hydra's own behaviour."""
    import dataclasses
    import hashlib
    import pickle

    try:
        from hydra._internal.sources_registry import SourcesRegistry
    except ImportError:
        return
    memo = {}

    def memoized(original):
        def load_config(self, config_path):
            full = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
            try:
                with open(full, "rb") as f:
                    key = (self.path, self.provider, full, hashlib.sha256(f.read()).digest())
            except OSError:
                return original(self, config_path)  # Hydra's own error
            if key not in memo:  # the bytes alone kept: no parsed nodes left for the garbage collector to walk
                got = original(self, config_path)
                memo[key] = dataclasses.replace(got, config=None), pickle.dumps(got.config)
            hit, config = memo[key]
            return dataclasses.replace(hit, config=pickle.loads(config), header=dict(hit.header))

        load_config.kselect_memo, load_config.original = memo, original
        return load_config

    resolve = SourcesRegistry.resolve
    if getattr(resolve, "kselect_memo", None) is not None:
        return

    def resolve_memoized(self, scheme):
        cls = resolve(self, scheme)
        if cls.__name__ == "FileConfigSource" and getattr(cls.load_config, "kselect_memo", None) is None:
            cls.load_config = memoized(cls.load_config)
        return cls

    resolve_memoized.kselect_memo = memo
    SourcesRegistry.resolve = resolve_memoized


if not os.environ.get("KSELECT_TEST_HYDRA_REPARSE"):
    _hydra_parses_each_conf_file_once()


@pytest.fixture(scope="session", autouse=True)
def _kselect_user_cache(tmp_path_factory):
    """kselect's user cache (selector/base/cache.py) in a folder of this test session, for the commands the
    tests spawn too: the tests never read or fill the user's own. Under xdist the workers share one (the
    session's base folder holds theirs), as processes share a user's: each cold compose or parse is paid once,
    not once a worker; entries are keyed by content and written atomically."""
    mp = pytest.MonkeyPatch()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "xdg-cache"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("xdg-cache")
    mp.setenv("XDG_CACHE_HOME", str(path))
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
