"""gemma4/host_stage.py: host values into a captured step's static buffer (pinned and asynchronous on CUDA)."""

import pytest
import torch

from kselect.gemma4.host_stage import HostStage


def test_put_writes_the_leading_rows_from_a_list_or_a_host_tensor():
    dst = torch.full((6,), -7, dtype=torch.long)
    st = HostStage(dst)
    st.put([1, 2, 3])
    assert dst.tolist() == [1, 2, 3, -7, -7, -7]
    st.put(torch.arange(6))
    assert dst.tolist() == list(range(6))
    table = torch.zeros(2, 3, dtype=torch.int32)
    HostStage(table).put(torch.tensor([[4, 5, 6]], dtype=torch.int32))
    assert table.tolist() == [[4, 5, 6], [0, 0, 0]]


def test_put_refuses_values_that_do_not_fit():
    st = HostStage(torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"\(3, 3\) do not fit a buffer of \(2, 3\)"):
        st.put(torch.zeros(3, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="do not fit"):
        st.put(torch.zeros(2, 4, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_put_is_pinned_and_never_rewrites_a_buffer_a_pending_copy_still_reads():
    dst = torch.zeros(1 << 16, dtype=torch.long, device="cuda")
    st = HostStage(dst)
    assert st.buf.is_pinned()
    with pytest.raises(ValueError, match="host values"):
        st.put(torch.ones(3, dtype=torch.long, device="cuda"))
    torch.cuda._sleep(200_000_000)  # keep the stream busy: the first copy stays pending while the host goes on
    st.put(torch.ones(1 << 16, dtype=torch.long))
    first = dst.clone()  # in stream order after the first copy
    st.put(torch.full((1 << 16,), 2, dtype=torch.long))  # must wait for the first copy before rewriting buf
    second = dst.clone()
    torch.cuda.synchronize()
    assert bool((first == 1).all()) and bool((second == 2).all())
