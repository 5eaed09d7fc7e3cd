"""kselect's bundled Gemma-4 text decoder: model, paged KV cache, engine, checkpoints.

Layout, one role a file:
  config.py        Gemma4Args and the MTP drafter's DrafterArgs
  layers.py        building blocks (norm, rope, GeGLU MLP, MoE router and experts)
  model.py         the decoder's modules (the weights); drafter.py the MTP drafter's
  forward.py       the one forward, over ops: ops.py (PyTorch, the reference) or fused.py (Triton, torch.compile)
  step_context.py  what a step carries per KV-cache group; draft_kv.py the drafter's view of the target's cache
  checkpoint.py    HF checkpoints (target and drafter), seeded weights; drafter_init.py seeded drafters
  sequence.py, block_manager.py, kv_cache.py, scheduler.py, model_runner.py, graphs.py
                   the runtime: sequences, blocks, cache, what each step writes, step metadata, captured steps
  engine.py        Engine (extend, prefill, decode) with its EngineConfig (engine_config.py)
  generate.py      the one generation loop: plain decoding; speculative.py its speculative step strategy
The command line (`kselect run`) is kselect/commands/run.py, over kselect/run.py.
"""

if __name__ != "kselect.gemma4":  # one module, one name (pyproject.toml maps the folder to kselect.gemma4)
    raise ImportError("import kselect.gemma4, not gemma4: the folder is a subpackage of kselect (pip install -e .)")

from .config import FULL, SLIDING, Gemma4Args  # noqa: F401
from .model import Gemma4  # noqa: F401
