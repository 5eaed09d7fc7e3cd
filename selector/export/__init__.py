"""Layer 6: a Selection as text: table, JSON, Markdown (render.py) and vLLM arguments (vllm_export.py);
formats.py names each output. Depends on nothing above it."""
