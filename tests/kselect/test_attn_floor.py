"""kselect/measurement/probes/attn_floor: the call it times computes what kernels/reference.py computes (on CPU in the
interpreter at a short context; on the GPU, marked, at E4B's), and its command refuses what it cannot run."""

import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")
from kselect.measurement.probes import attn_floor as A  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("case", list(A.CASES))
def test_the_timed_call_equals_the_reference(case):
    assert A.check(case, DEV, 40 if DEV == "cpu" else A.KV_LEN) <= A.TOL


def test_a_wrong_window_would_fail_the_check(monkeypatch):
    monkeypatch.setitem(A.CASES, "sliding", dict(d=256, window=8))  # the reference sees 8 keys, the kernel too: equal
    assert A.check("sliding", DEV, 40) <= A.TOL
    real = A.call
    monkeypatch.setattr(A, "call", lambda inp, prefetch=None: real(dict(inp, window_left=-1), prefetch))
    assert A.check("sliding", DEV, 40) > A.TOL  # the kernel sees all 40: the check tells them apart


def test_a_chain_cycles_the_sets_and_its_last_call_is_right():
    sets = A.inputs("sliding", 2, 40, 16, DEV)
    out, inp = A.chain("pdl", sets, 2)
    assert inp is sets[1] and A.rel_err(out, inp) <= A.TOL
    assert A.chain("pdl_hot", sets, 2)[1] is sets[0]


def test_unknown_mode_refused():
    with pytest.raises(ValueError, match="plain, pdl, pdl_kv_l2, pdl_hot, pdl_lean, pdl_pos32, gemv, pdl_gemv"):
        A.chain("fast", [], 1)
    with pytest.raises(ValueError, match="pdl_gemv needs the o_proj weights"):
        A.chain("pdl_gemv", [], 1)


def _gemv_right(y, x, w):
    want = x.float() @ w.float().T
    return float((y.float() - want).abs().max() / want.abs().max()) <= A.TOL


def test_the_gemv_modes_project_what_they_say():
    sets, ws = A.inputs("sliding", 2, 40, 16, DEV), A.weights("sliding", 2, DEV, hidden=64)
    y, _ = A.chain("gemv", sets, 3, ws)  # the third GEMV: ws[0] on the fixed input
    assert y.shape == (1, 64) and _gemv_right(y, sets[0]["q"].reshape(1, -1), ws[0])
    out, inp = A.chain("pdl_gemv", sets, 2, ws)  # the attention still right with a GEMV after each call
    assert inp is sets[1] and A.rel_err(out, inp) <= A.TOL


@pytest.mark.skipif(DEV != "cpu", reason="the CPU refusal")
@pytest.mark.parametrize("extra,says", [([], "needs a CUDA device"),
                                         (["--page", "12"], "--page must be a power of two")])
def test_a_real_process_on_cpu_exits_2_in_one_line_and_writes_nothing(tmp_path, extra, says):
    out = tmp_path / "out dir"
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.probes.attn_floor", "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs CUDA")
@pytest.mark.parametrize("mode", A.MODES)
def test_every_mode_runs_a_chain_whose_last_call_is_right(mode):
    sets, ws = A.inputs("sliding", 2, A.KV_LEN, 16, "cuda"), A.weights("sliding", 2, "cuda")
    out, inp = A.chain(mode, sets, 3, ws)
    assert inp is sets[0]  # the third call: set 2 % 2 (set 0 throughout if hot)
    if mode == "gemv":
        assert _gemv_right(out, sets[0]["q"].reshape(1, -1), ws[0])
    else:
        assert A.rel_err(out, inp) <= A.TOL


def test_a_wrong_call_stops_the_timing_before_it_starts(monkeypatch):
    monkeypatch.setattr(A, "inputs", lambda *a: [])
    monkeypatch.setattr(A, "check", lambda *a: 0.5)
    monkeypatch.setattr(A, "time_graph", lambda *a: pytest.fail("timed a wrong call"))
    with pytest.raises(A.WrongResult, match="sliding call differs .* 5.00e-01"):
        A.measure(16, 1)
