"""One-off diagnostics that print what they find and record nothing (`python3 -m kselect.measurement.probes.<name>`,
on a GPU): how far CUDA-graph steps drift from eager ones, and the prefill-graph traces of
bench/results/h200/epilogues/D."""
