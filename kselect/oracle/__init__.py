"""kselect against vLLM's own selection code (`kselect oracle`).

kselect's side (no vLLM, no torch): the cell grid and record format (`cells`), the per-field
comparison (`compare`), the release's CPU environment (`env`), the batch runner (`run`), the
model folders (`models`) and the command (`cli`). vLLM's side, run by the release's own python
as scripts and never imported here: `worker.py`, `vllm_chain.py` and `stubs/`.
"""
