"""kselect/measurement/kernels/attn_sass: the SASS it counts, and what its counts say about the attention's switches
(compiled for SM90 on this CPU machine, in a subprocess: this session's kernels are the interpreter's)."""

import json
import os
import subprocess
import sys

import pytest

from kselect.measurement.kernels import attn_sass as S

SAMPLE = """
        code for sm_90
                Function : _attn_fwd
        /*0000*/                   LDC R1, c[0x0][0x28] ;               /* 0x00000a00ff017b82 */
                                                                        /* 0x000fe20000000800 */
        /*0010*/                   ACQBULK ;                            /* 0x0000000000007b1d */
        /*0020*/              @!P0 EXIT ;                               /* 0x000000000000894d */
        /*0030*/               @P5 LDG.E.128 R40, desc[UR10][R18.64] ;  /* 0x0000000a12285981 */
        /*0040*/                   HMMA.16816.F32.BF16 R92, R92, R84, RZ ;
        /*0050*/                   IMAD.WIDE.U32 R38, R46, UR15, RZ ;
.L_x_1:
        /*0060*/                   BRA 0x60;
        /*10a90*/              @!UPT UIADD3 URZ, URZ, URZ, URZ ;
"""


def test_loop_counts_the_longest_backward_branch_s_body():
    assert S.loop(SAMPLE) == 1  # BRA 0x60 at 0x60
    text = SAMPLE.replace("BRA 0x60;", "@!P0 BRA 0x30 ;")  # back to the LDG: LDG, HMMA, IMAD, BRA
    assert S.loop(text) == 4
    assert S.loop(SAMPLE.replace("BRA 0x60;", "BRA 0x10a90;")) == 0  # forward only


def test_parse_takes_each_instruction_s_opcode():
    ops = S.parse(SAMPLE)
    assert ops == ["LDC", "ACQBULK", "EXIT", "LDG", "HMMA", "IMAD", "BRA", "UIADD3"]  # 5-digit addresses too
    assert S.count(ops) == dict(instructions=8, HMMA=1, LDGSTS=0, LDG=1, STG=0, BAR=0, STL=0, integer=1)


COMPILE = r"""
import json, sys
from kselect.measurement.kernels import attn_sass as S
try:
    texts = {k: S.sass(S.cubin({**S.BASE, **S.CASES["sliding"], **S.SWITCHES[k]}))
             for k in ("plain", "pos32", "rule", "rule_off32")}
    print(json.dumps({k: dict(S.count(S.parse(t)), loop=S.loop(t)) for k, t in texts.items()}))
except S.NoAssembler as e:
    print(json.dumps({"skip": str(e)}))
"""


@pytest.fixture(scope="module")
def counts():
    """attn_sass's counts of the sliding layer under four switches, compiled once for the module."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in done:
        pytest.skip(done["skip"])
    return done


def test_32_bit_positions_take_integer_instructions_out_of_the_sliding_kernel(counts):
    """The sliding layer's attention compiled for SM90 with and without POSITIONS_32: the same tensor-core and
    key-tile instructions (the same work), fewer instructions, and the difference is integer arithmetic."""
    plain, pos32 = counts["plain"], counts["pos32"]
    assert plain["HMMA"] == pos32["HMMA"] == 32 and plain["LDGSTS"] == pos32["LDGSTS"] > 0
    assert pos32["instructions"] < plain["instructions"] and pos32["integer"] < plain["integer"]


def test_32_bit_cache_offsets_take_integer_instructions_out_of_the_rule(counts):
    """OFFSETS_32 on top of the H100's batch-1 rule: the same tensor-core and key-tile instructions, fewer integer
    ones (32-bit row offsets, unsigned page division)."""
    rule, off32 = counts["rule"], counts["rule_off32"]
    assert rule["HMMA"] == off32["HMMA"] and rule["LDGSTS"] == off32["LDGSTS"] > 0
    assert off32["instructions"] < rule["instructions"] and off32["integer"] < rule["integer"]
    assert 0 < off32["loop"] < rule["loop"] < rule["instructions"]  # the key loop shorter too


def test_refuses_the_interpreter_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kselect.measurement.kernels.attn_sass", "--out", str(tmp_path / "o")],
                       env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unset TRITON_INTERPRET" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()
