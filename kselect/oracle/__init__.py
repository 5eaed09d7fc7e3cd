"""kselect against vLLM's own selection code: the oracle's cell grid and record format
(`cells`), and the per-field comparison (`compare`). No torch, no vLLM: the oracle itself
runs in its own venv (bench/vllm/), these modules only read what it wrote."""
