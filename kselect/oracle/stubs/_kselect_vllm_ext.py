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
        return None

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        _capability_queries()  # any vLLM extension stands for the whole (empty) build


class _NeverCalled:
    """An op the oracle binds but never runs (layers are built on the meta device)."""

    def __init__(self, name):
        self.name = name
        self.default = self

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torch.ops._C.{self.name}: the kselect oracle builds layers, never runs them")


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
