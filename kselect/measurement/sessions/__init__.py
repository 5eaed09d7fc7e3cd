"""GPU sessions of several parts that are not (yet) experiment configs (bench/conf/experiment/), as shell scripts
shipped as package data: `vllm_triton.sh`, vLLM's own Triton kernel on the H200 (issue #43)."""
