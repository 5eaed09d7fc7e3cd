"""Measurement, one role a module (the commands over it are kselect/commands/; selection by measurement is the
selector's, selector/measure/):

- on this machine's kernels: `conformance` (claims run against the reference), `perf` with `perf_targets` (what to
  time) and `perf_timing` (how), `perf_steps` (is a prefill step host- or GPU-bound), `kernel_timing`,
  `gemv_variants`, `profiling`; `measured_versions` (the kernel builds a measurement ran);
- end to end: `e2e` (the harness, a package of one role a module) with `e2e_report` (its report and objective table), `step_profile`, `paired`
  (round-by-round statistics), `prefill_rounds`, `prefill_clocks`, `explain_vs_e2e`;
- recorded runs: `steps` (the project's own steps, each typed options and a function) and `runner` (`kselect bench`,
  the experiments of bench/conf/experiment/); `plot_results` (roofline plots and tables of the records).

The measurement programs, one room a role (`python3 -m kselect.measurement.<room>.<name>`; shell scripts ship as
package data): `gemma4/` model-level drivers, `kernels/` kernel-level timing, `probes/` one-off GPU diagnostics,
`selector/` the selector's own speed, `vllm/` vLLM's own selection beside ours (the export round trip, agreement,
the oracle fixtures), `review/` review recipes, `builds/` the kernel builds a GPU run needs, `sessions/` multi-part
GPU sessions. bench/ holds only the experiment configs (bench/conf/) and the records (bench/results/).
"""
