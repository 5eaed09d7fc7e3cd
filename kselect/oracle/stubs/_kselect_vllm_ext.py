"""vLLM's compiled extensions as empty modules: vllm._C*, and vllm_flash_attn's
_vllm_fa2_C/_vllm_fa3_C (which then count as built; vllm_flash_attn's capability gates decide
what runs). Installed once per process, by the oracle and by sitecustomize in vLLM's own
subprocesses (the model registry inspects model classes in one)."""

import importlib.abc
import os
import pathlib
import re
import importlib.machinery
import sys
import types


class EmptyExtensions(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        leaf = fullname.rsplit(".", 1)[-1]
        if fullname.startswith("vllm.") and leaf.startswith("_") and leaf.endswith("_C"):
            return importlib.machinery.ModuleSpec(fullname, self)
        if fullname.startswith("vllm._C") or fullname.startswith("vllm._moe_C"):
            return importlib.machinery.ModuleSpec(fullname, self)
        if fullname.startswith("vllm.") and "deep_gemm._C." in fullname:  # its compiled submodules
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        if spec.name.endswith("deep_gemm._C") or "deep_gemm._C." in spec.name:
            mod.__getattr__ = _deep_gemm_op  # the facade vLLM's vendored DeepGEMM reads its ops from
            mod.__path__ = []
        return mod

    def exec_module(self, module):
        _capability_queries()  # any vLLM extension stands for the whole (empty) build


class _NeverCalled:
    """An op the oracle binds but never runs (layers are built on the meta device)."""

    def __init__(self, name, where="torch.ops._C."):
        self.name = where + name
        self.default = self

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name}: the kselect oracle builds layers, never runs them")


def _deep_gemm_op(name):
    """vLLM's vendored DeepGEMM (vllm.third_party.deep_gemm, Python beside its compiled `_C`) imports
    as in a full install, so `has_deep_gemm()` is what it is on a GPU machine (DeepSeek-V3.2's sparse
    indexer requires it at construction). Its settings (init, shutdown, set_*) do nothing here; every
    kernel is a placeholder that raises if called. Whether DeepGEMM *runs* GEMMs (is_deep_gemm_supported)
    still needs nvcc, which a CPU machine lacks."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in ("init", "shutdown") or name.startswith("set_"):
        return lambda *args, **kwargs: None
    return _NeverCalled(name, "vllm.third_party.deep_gemm._C.")


class _EmptyBuild:
    """torch.ops._C as an empty build answers it:
    - capability queries (`*supports*`, `*supported`) say "not built": they pick quantized-GEMM
      kernels, never attention;
    - ops vLLM probes for with `hasattr(torch.ops._C, "...")` anywhere in its sources are
      absent, so every optional path stays off (and no fake impl is registered for them);
    - every other op (bound by layer constructors or by compile passes at import) is a
      placeholder that raises if called."""

    def __init__(self, probed):
        self._probed = probed

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if "supports" in name or name.endswith("supported"):
            return lambda *args, **kwargs: False
        if name in self._probed:
            raise AttributeError(f"torch.ops._C.{name} (absent from the oracle's empty build)")
        return _NeverCalled(name)


def _probed_ops():
    src = os.environ.get("KSELECT_VLLM_SRC")
    names = set()
    if src:
        pat = re.compile(r"hasattr\(\s*torch\.ops\._C\s*,\s*[\"'](\w+)[\"']")
        for path in pathlib.Path(src, "vllm").rglob("*.py"):
            names.update(pat.findall(path.read_text(errors="replace")))
    return frozenset(names)


def _capability_queries():
    import torch

    if not isinstance(torch.ops.__dict__.get("_C"), _EmptyBuild):
        torch.ops._C = _EmptyBuild(_probed_ops())


if not any(isinstance(f, EmptyExtensions) for f in sys.meta_path):
    sys.meta_path.insert(0, EmptyExtensions())
