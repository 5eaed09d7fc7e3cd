"""The kernel builds a GPU measurement runs, as shell scripts shipped as package data: vLLM's FA3/FA4 out of its wheel
(`install_vllm_fa.sh`) and flash-attention's own FA3 for SM90 (`build_fa3_hopper.sh`, its source packed by
`pack_fa3src.sh` for a machine without network). `kselect.measurement.measured_versions` records which ran."""
