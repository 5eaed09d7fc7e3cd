"""The chain moved into the package (kselect/oracle/vllm_chain.py, the model folders in
kselect/oracle/models.py); this name stays for bench/vllm/oracle.py and export_roundtrip.py."""

from kselect.oracle.models import write_model_dirs  # noqa: F401
from kselect.oracle.vllm_chain import *  # noqa: F401,F403
from kselect.oracle.vllm_chain import STUBS, boot, engine_kwargs, run_engine_args  # noqa: F401
