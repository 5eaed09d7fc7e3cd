"""Layer 1: the configuration: the vocabulary, the pydantic schema, the conf-tree guard, overlay order,
platform detection and Hydra composition (compose.py)."""
