"""Diagnostics run on a GPU (`python3 -m kselect.measurement.probes.<name>`). Most print what they find and record
nothing: how far CUDA-graph steps drift from eager ones, and the prefill-graph traces of
bench/results/h200/epilogues/D. Three write a record under --out, with the command, commit, card and versions: where
a decode step's time goes kernel by kernel (decode_timeline), what one dependent step costs (sync_floor), and what
E4B's batch-1 attention costs as a dependent step on its own (attn_floor)."""
