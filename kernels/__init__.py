"""kselect's kernels (Triton, FlashAttention and FlashInfer wrappers, the PyTorch reference); they import nothing
else of kselect (tests/test_layers.py)."""

if __name__ != "kselect.kernels":  # one module, one name (pyproject.toml maps the folder to kselect.kernels)
    import sys
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec
    from pathlib import Path

    # From the checkout's root this folder shadows an installed top-level `kernels` (Hugging Face's): hand the
    # name to that package where one is installed. Else the name stays an empty stand-in with no file and no
    # submodules (as an absent package looks to a probe such as transformers' import check), whose attributes
    # name the kselect spelling: none of this folder's modules ever loads under a second name.
    _root = Path(__file__).resolve().parent.parent
    _spec = PathFinder.find_spec(__name__, [p for p in sys.path if Path(p or ".").resolve() != _root])
    if _spec is not None and _spec.loader is not None:
        sys.modules[__name__] = _module = module_from_spec(_spec)  # the import statement returns what sys.modules holds
        _spec.loader.exec_module(_module)
    else:
        __path__ = []
        del __file__, _root, _spec, sys, PathFinder, module_from_spec, Path

        def __getattr__(name):
            raise AttributeError(f"kernels.{name}: import kselect.kernels, not kernels: the folder is a subpackage of "
                                 "kselect (pip install -e .)")
