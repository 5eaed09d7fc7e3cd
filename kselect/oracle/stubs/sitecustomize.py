"""On PYTHONPATH only inside the oracle (kselect/oracle/vllm_chain.py sets it for vLLM's own
subprocesses): the compiled-extension stubs."""

import os

if os.environ.get("KSELECT_VLLM_ORACLE"):
    import _kselect_vllm_ext  # noqa: F401
