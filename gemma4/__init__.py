"""kselect's bundled Gemma-4 text decoder: model, paged KV cache, engine, checkpoints."""

from kselect.gemma4.config import FULL, SLIDING, Gemma4Args  # noqa: F401
from kselect.gemma4.model import Gemma4  # noqa: F401
