"""Kernel-level timing (`python3 -m kselect.measurement.kernels.<name>`): attention prefill TFLOP/s and decode GB/s
(`attention`), the decode GEMV (`gemv`), the Triton decode kernel's configs (`tune_triton_decode`) and FlashInfer's
plan cost (`flashinfer_plan_cost`). Their timing functions are `kselect.measurement.kernel_timing`."""
