"""Random paged-attention cases for tests, conformance and benchmarks (one builder, every caller)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .reference import is_fp8, paged_attention


@dataclass
class PagedCase:
    q: torch.Tensor  # [total_q, Hq, D] model dtype
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seqused_k: torch.Tensor
    block_table: torch.Tensor
    softmax_scale: float
    window_left: int = -1
    mm_prefix: torch.Tensor | None = None
    sinks: torch.Tensor | None = None
    k_descale: torch.Tensor | None = None
    v_descale: torch.Tensor | None = None
    q_positions: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    @property
    def max_seqlen_q(self) -> int:
        return int((self.cu_seqlens_q[1:] - self.cu_seqlens_q[:-1]).max())

    @property
    def max_seqlen_k(self) -> int:
        return int(self.seqused_k.max())

    def to(self, device) -> "PagedCase":
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.__dict__.items()}
        return PagedCase(**moved)

    def reference(self, q=None, q_descale=None, out_dtype=None):
        return paged_attention(
            self.q if q is None else q, self.k_cache, self.v_cache, self.cu_seqlens_q, self.seqused_k,
            self.block_table, self.softmax_scale, window_left=self.window_left, mm_prefix=self.mm_prefix,
            sinks=self.sinks, q_descale=q_descale, k_descale=self.k_descale, v_descale=self.v_descale,
            q_positions=self.q_positions, out_dtype=out_dtype or self.q.dtype)


def make_case(q_lens, kv_lens, *, hq=4, hkv=2, d=64, block_size=16, dtype=torch.float32,
              cache_dtype=None, descale="layer", window_left=-1, mm_spans=None, sinks=False,
              spare_blocks=3, device="cpu", seed=0) -> PagedCase:
    """q_lens[i] <= kv_lens[i]; blocks are assigned in a random order (never identity).

    cache_dtype: None (= dtype) or an fp8 dtype; then descale is "layer" (fp32 scalar) or
    "seq_head" ([B, Hkv]). mm_spans: per sequence a list of (start, end) absolute spans.
    """
    g = torch.Generator().manual_seed(seed)
    b = len(kv_lens)
    assert all(0 < ql <= kl for ql, kl in zip(q_lens, kv_lens)), (q_lens, kv_lens)
    nblk = [-(-kl // block_size) for kl in kv_lens]
    width = max(nblk)
    total_blocks = sum(nblk) + spare_blocks
    perm = torch.randperm(total_blocks, generator=g)
    table = torch.zeros(b, width, dtype=torch.int32)
    used = 0
    for i, n in enumerate(nblk):
        table[i, :n] = perm[used:used + n].to(torch.int32)
        used += n
    cache_dtype = cache_dtype or dtype
    shape = (total_blocks, block_size, hkv, d)
    kv = [torch.randn(shape, generator=g) for _ in range(2)]
    k_descale = v_descale = None
    if is_fp8(cache_dtype):
        kv = [(x * 2).to(cache_dtype) for x in kv]  # stored values span a few binades
        if descale == "layer":
            k_descale = torch.tensor(0.37, dtype=torch.float32)
            v_descale = torch.tensor(0.61, dtype=torch.float32)
        else:
            k_descale = 0.2 + torch.rand(b, hkv, generator=g)
            v_descale = 0.2 + torch.rand(b, hkv, generator=g)
    else:
        kv = [x.to(cache_dtype) for x in kv]
    q = torch.randn(sum(q_lens), hq, d, generator=g).to(dtype)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    mm = None
    if mm_spans is not None:
        s = max(1, max(len(x) for x in mm_spans))
        mm = torch.full((b, s, 2), -1, dtype=torch.int32)
        for i, spans in enumerate(mm_spans):
            for j, (st, en) in enumerate(spans):
                mm[i, j, 0], mm[i, j, 1] = st, en
    snk = (torch.randn(hq, generator=g) * 2).float() if sinks else None
    case = PagedCase(q, kv[0], kv[1], cu, torch.tensor(kv_lens, dtype=torch.int32), table, d ** -0.5,
                     window_left=window_left, mm_prefix=mm, sinks=snk, k_descale=k_descale, v_descale=v_descale)
    return case.to(device) if device != "cpu" else case

