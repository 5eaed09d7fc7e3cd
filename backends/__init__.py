"""Attention backends: one adapter per kernel family behind `backends.base.AttentionBackend`."""

from kselect.backends.base import (AttentionBackend, AttentionMetadata, BackendUnavailableError,  # noqa: F401
                           LayerParams)
from kselect.backends.registry import make_backend  # noqa: F401
