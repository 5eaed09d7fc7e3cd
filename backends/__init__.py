"""Attention backends: one adapter per kernel family behind `backends.base.AttentionBackend`."""

if __name__ != "kselect.backends":  # one module, one name (pyproject.toml maps the folder to kselect.backends)
    raise ImportError("import kselect.backends, not backends: the folder is a subpackage of kselect (pip install -e .)")

from .base import AttentionBackend, AttentionMetadata, BackendUnavailableError, LayerParams  # noqa: F401
from .registry import make_backend  # noqa: F401
