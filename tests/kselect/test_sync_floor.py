"""kselect/measurement/probes/sync_floor: its four chains compute what PyTorch computes (so a timing is of the right
work), on CPU in the interpreter (the barriers with one program) and on the GPU (marked) with every program count; the
acquire-load poll compiles for SM90 to our load instruction."""

import re
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")
from kselect.measurement.probes import sync_floor as S  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_each_chain_equals_pytorch_and_a_wrong_step_count_would_not():
    errs = S.check(DEV, 4096)
    assert set(errs) == set(S.MODES) and max(errs.values()) < 1e-5
    x = torch.randn(S.H, generator=torch.Generator().manual_seed(0)).double()
    assert (S.reference(x, 3) - S.reference(x, 2)).abs().max() > 1e-2  # the check tells the step counts apart


def test_more_programs_launch_a_slice_each():
    errs = S.check(DEV, 256)  # ten programs: launched chains only on CPU
    assert set(errs) >= {"graph", "pdl"} and max(errs.values()) < 1e-5


def test_unknown_mode_refused():
    with pytest.raises(ValueError, match="graph, pdl, barrier, barrier_ld"):
        S.chain("fast", torch.zeros(2, S.H), torch.zeros(1, dtype=torch.int32), 1, 4096)


@pytest.mark.skipif(DEV != "cpu", reason="the CPU refusal")
def test_a_real_process_on_cpu_exits_2_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out dir"
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.probes.sync_floor", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs a CUDA device" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("block", S.BLOCKS)
def test_barrier_chain_is_right_with_every_program_resident(block):
    errs = S.check("cuda", block, 16)
    assert set(errs) == set(S.MODES) and max(errs.values()) < 1e-5


def test_the_load_poll_compiles_for_sm90_to_acquire_loads_whatever_triton_makes_of_the_atomic_poll():
    from test_sm90_compile import sm90_ptx

    cases = [dict(id=f"ld={ld}", module="kselect.measurement.probes.sync_floor", kernel="_barrier_kernel",
                  types=dict(buf="*fp32", cnt_ptr="*i32", eps="fp32"), consts=dict(BLOCK=256, N_PAD=4096, LD=ld))
             for ld in (False, True)]
    ptx = sm90_ptx(cases)
    for ld in (False, True):  # the count's first read and the loop's: ours where LD; the arrive, one atomic, in both
        ours = len(re.findall(r"ld\.acquire\.gpu\.global\.b32", ptx[f"ld={ld}"]))
        atomics = len(re.findall(r"atom\.global\.gpu\.acq_rel\.add", ptx[f"ld={ld}"]))
        assert (ours, atomics) == ((2, 1) if ld else (0, 1)), (ld, ours, atomics)
