"""Stand-in for flashinfer-python on a CPU machine (the oracle only selects); its version is the
release's pin (`flashinfer-python==...` in the vLLM wheel's METADATA), set by the oracle's boot.

Every `flashinfer.<sub>` module imports, and every name in it is a placeholder class: vLLM's
selection code imports FlashInfer's kernels at module level but never calls them while
choosing a backend. What FlashInfer supports is decided by vLLM's own capability gates.
"""

import importlib.abc
import importlib.machinery
import sys
import types

import os

__version__ = os.environ.get("KSELECT_FLASHINFER_VERSION", "0.7.2.post1")


class _Placeholder:
    """Any FlashInfer name: constructible, callable, subscriptable, never computing."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("flashinfer stub: no kernels on this machine (oracle selection only)")

    def __class_getitem__(cls, item):
        return cls


def _placeholder(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Placeholder,), {})


def __getattr__(name):
    return _placeholder(name)


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("flashinfer."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _placeholder
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_SubmoduleFinder())  # after the path finder: files here win
