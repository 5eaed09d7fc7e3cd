"""The benchmarks' library: the end-to-end run (e2e), its report, paired round-by-round statistics, interleaved
prefill rounds, step profiles and kernel timing, and the runner of bench/conf/experiment/ (`kselect bench`)."""
