"""kernels/slot_mapping: the kernel against the PyTorch ops a captured step runs without it (gemma4/model_runner.py on
the CPU)."""

import pytest
import torch

pytest.importorskip("triton")
from fused_helpers import DEV, require_interpreter  # noqa: E402

from kselect.kernels import slot_mapping as K  # noqa: E402

require_interpreter(K._slot_mapping_kernel)


def torch_slots(positions, table, bs):
    seq_of = torch.arange(positions.numel(), device=positions.device) // (positions.numel() // table.shape[0])
    return table[seq_of, torch.div(positions, bs, rounding_mode="floor")].long() * bs + positions % bs


@pytest.mark.parametrize("per_seq", [1, 5])  # decode (one token a sequence), a speculative pass (k + 1)
@pytest.mark.parametrize("bs", [16, 64])
def test_equals_the_pytorch_ops(per_seq, bs):
    g = torch.Generator().manual_seed(bs + per_seq)
    b, width = 3, 9
    table = torch.randperm(200, generator=g)[: b * width].view(b, width).to(torch.int32).to(DEV)
    starts = torch.randint(0, (width - 1) * bs, (b,), generator=g)
    positions = torch.cat([torch.arange(s, s + per_seq) for s in starts.tolist()]).to(DEV)
    want = torch_slots(positions, table, bs)
    out = torch.full_like(positions, -7)
    assert torch.equal(K.slot_mapping(positions, table, bs, out), want) and torch.equal(out, want)


def test_bad_shapes():
    table = torch.zeros(2, 4, dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="3 positions do not split evenly over 2 sequences"):
        K.slot_mapping(torch.zeros(3, dtype=torch.long, device=DEV), table, 16, torch.empty(3, dtype=torch.long, device=DEV))
    with pytest.raises(ValueError, match="out \\[T\\] int64"):
        K.slot_mapping(torch.zeros(2, dtype=torch.long, device=DEV), table, 16, torch.empty(2, dtype=torch.int32, device=DEV))
