"""Model-level measurements of the bundled Gemma-4 (`python3 -m kselect.measurement.gemma4.<name>`): fused vs unfused
decode (`fusion`, `fusion_tune`), a perf bucket against the model step it stands for (`bucket_vs_step`), speculative
decoding (`mtp`), long contexts (`long_context`, `long_prompt`), eager prefill profiles (`prefill_profile`) and plain
generation throughput (`generate`). The end-to-end harness is `kselect.measurement.e2e`."""
