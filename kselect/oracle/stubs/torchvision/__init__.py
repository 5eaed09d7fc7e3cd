"""Stand-in for torchvision: transformers' Gemma-4 processor imports it, and the registry's
build does not load beside a CPU torch. The oracle never runs a vision op. Submodules without
a file here import as empty modules whose names are placeholder classes."""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+kselect.stub"


def _attr(module_name):
    """Unknown names: InterpolationMode is the enum, other capitalised names are placeholder
    classes, lowercase names are submodules (`from torchvision.transforms.v2 import functional`)."""

    def getattr_(name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "InterpolationMode":
            from torchvision.transforms import InterpolationMode

            return InterpolationMode
        if name[:1].isupper():
            return type(name, (), {})
        import importlib

        return importlib.import_module(f"{module_name}.{name}")

    return getattr_


__getattr__ = _attr(__name__)


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _attr(spec.name)
        return mod

    def exec_module(self, module):
        pass


sys.meta_path.append(_SubmoduleFinder())  # after the path finder: files here win
