"""Attention kernels: the PyTorch reference, our Triton paged kernel, FlashAttention wrappers."""
