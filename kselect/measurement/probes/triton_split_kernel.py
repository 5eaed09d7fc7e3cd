"""Probe: kernels/triton_paged.py at the tiny model's prefill-graph calls (16 padded rows or 8, FP8 cache, full d128
and sliding d64 window 15, a 272-key table) against the fp32 reference, with the automatic config (small-batch path)
and forced BLOCK_N / splits / FP8 widening. `python3 -m kselect.measurement.probes.triton_split_kernel [cuda|cpu]`
(bench/results/h200/epilogues/D/split_kernel.log; on CPU under TRITON_INTERPRET=1, without the asm rows)."""
import sys

import torch

from kselect.kernels.reference import paged_attention
from kselect.kernels.triton_paged import paged_attention_triton


def main() -> None:
    torch.manual_seed(0)
    dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    fp8 = torch.float8_e4m3fn
    page, nb = 16, 24
    for name, hkv, d, hq, win in (("full", 1, 128, 4, -1), ("sliding", 2, 64, 4, 15)):
        kc = (torch.randn(nb, page, hkv, d, device=dev) * 0.5).to(fp8)
        vc = (torch.randn(nb, page, hkv, d, device=dev) * 0.5).to(fp8)
        bt = torch.randperm(nb, device=dev)[None, :17].int()
        for start in (0, 24, 64, 80, 96):
            for T, n in ((16, 16), (16, 5), (8, 8)):
                q = torch.randn(T, hq, d, device=dev).to(torch.bfloat16)
                cu = torch.tensor([0, T], device=dev, dtype=torch.int32)
                su = torch.tensor([start + T], device=dev, dtype=torch.int32)
                one = torch.ones((), device=dev)
                ref = paged_attention(q.float(), kc, vc, cu, su, bt, 0.1, causal=True, window_left=win,
                                      k_descale=one, v_descale=one).float()[:n]
                for label, kw in (("auto maxk=272", dict(max_seqlen_k=272)),
                                  ("auto maxk=used", dict(max_seqlen_k=start + T)),
                                  ("bn32 s9", dict(max_seqlen_k=272, num_splits=9, config=(16, 32, 4, 2, False))),
                                  ("bn32 s9 asm", dict(max_seqlen_k=272, num_splits=9, config=(16, 32, 4, 2, True))),
                                  ("bn32 s1 asm", dict(max_seqlen_k=272, num_splits=1, config=(16, 32, 4, 2, True))),
                                  ("bn128 s1 asm", dict(max_seqlen_k=272, num_splits=1, config=(16, 128, 4, 2, True)))):
                    if dev == "cpu" and "asm" in label:
                        continue
                    out = paged_attention_triton(q, kc, vc, cu, su, bt, 0.1, max_seqlen_q=T, causal=True, window_left=win,
                                                 k_descale=one, v_descale=one, out_dtype=torch.bfloat16, **kw).float()[:n]
                    err = ((out - ref).abs().amax() / ref.abs().amax()).item()
                    bad = ((out - ref).abs().amax((1, 2)) > 0.05).nonzero().flatten().tolist()
                    flag = f" BAD rows {bad}" if bad else ""
                    print(f"{name} start {start} T {T} n {n} {label}: rel err {err:.4f}{flag}")


if __name__ == "__main__":
    main()
