"""The GEMV kernels compile for SM90 on a CPU machine (Triton's ahead-of-time compile to a cubin): the interpreter
runs Python and cannot see what Triton's compiler rejects (a constexpr branch returning a pointer in one arm and a
float in the other ran in the interpreter and failed to compile on the H100). The compile runs in a subprocess
without TRITON_INTERPRET (this session's kernels are the interpreter's)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")


def compiled(script: str, arg) -> dict:
    """The compile script's JSON result for its argument, run in a subprocess without TRITON_INTERPRET (this
    session's kernels are the interpreter's); the test skips where this Triton build has no SM90 assembler."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", ALIGNED + script, json.dumps(arg)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    done = json.loads(run.stdout.strip().splitlines()[-1])
    if all("ptxas" in str(v) for v in done.values()):
        pytest.skip("this Triton build has no SM90 assembler")
    return done


# Every compile script below starts with this: what a launch specializes on that the signature does not say. Triton's
# JIT marks a pointer argument 16-byte aligned where the tensor is (torch's allocations are), and that changes the code
# (16-byte vector loads, cp.async pipelining of a loop's loads, registers): without it the PTX is not the GPU's.
ALIGNED = r'''
def aligned(names, types, attrs=None):
    """ASTSource attrs: each pointer argument 16-byte aligned (as a launch specializes), plus the given ones."""
    out = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if str(types.get(n, "")).startswith("*")}
    out.update(attrs or {})
    return out


def sm90_ptx(kernel, consts, type_of):
    """kernel's SM90 PTX, lines, with these constexprs; type_of(name) the type of every other argument."""
    import inspect
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(inspect.signature(kernel.fn).parameters)
    types = {n: "constexpr" if n in consts else type_of(n) for n in names}
    src = ASTSource(fn=kernel, signature=types, constexprs={(names.index(n),): v for n, v in consts.items()},
                    attrs=aligned(names, types))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"].splitlines()
'''

PTX = r'''
import importlib, inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

done = {}
for case in json.loads(sys.argv[1]):
    kernel = getattr(importlib.import_module(case["module"]), case["kernel"])
    consts, given = case["consts"], case.get("types", {})
    names = list(inspect.signature(kernel.fn).parameters)
    types = {n: "constexpr" if n in consts else given.get(n) or ("*bf16" if n.endswith("_ptr") or n == "scalar"
             else "fp32" if n == "eps" else "i32") for n in names}
    try:
        done[case["id"]] = triton.compile(ASTSource(fn=kernel, signature=types, constexprs={
            (names.index(n),): v for n, v in consts.items()}, attrs=aligned(names, types)),
            target=GPUTarget("cuda", 90, 32),
            options=dict(num_warps=case.get("num_warps", 4))).asm["ptx"]
    except Exception as e:
        done[case["id"]] = "error: " + repr(e)[:2000]
print(json.dumps(done))
'''


def sm90_ptx(cases: list[dict]) -> dict:
    """{id: the PTX} of each case compiled for SM90 (or "error: ..."): a case names its kernel ("module", "kernel"), its
    "consts", and "types" where a parameter is not the default (`*bf16` for *_ptr and scalar, fp32 eps, else i32)."""
    done = compiled(PTX, cases)
    for c in cases:
        assert not done[c["id"]].startswith("error: "), done[c["id"]]
    return done


COMPILE = r'''
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import gemv as K

POINTERS = ("x_ptr", "w_ptr", "out_ptr", "mul_ptr", "res_ptr", "wa_ptr", "wb_ptr", "s_ptr", "t_res", "t_wa", "t_wb",
            "t_s", "t_n")
FLOATS = ("scale", "inv_cap", "cap", "eps", "t_eps")
done = {}
for case in json.loads(sys.argv[1]):
    kernel = getattr(K, case["kernel"])
    consts = case["consts"]
    names = list(inspect.signature(kernel.fn).parameters)
    types = {n: "constexpr" if n in consts else "*bf16" if n in POINTERS else "fp32" if n in FLOATS else "i32"
             for n in names}
    types["scalar"] = "*bf16" if consts["SCALAR_PTR"] else "fp32"
    if "TAIL" in consts:
        types["cnt_ptr"] = "*i32"
        types["t_scalar"] = "*bf16" if consts["T_SCALAR_PTR"] else "fp32"
    src = ASTSource(fn=kernel, signature=types, constexprs={(names.index(n),): v for n, v in consts.items()},
                    attrs=aligned(names, types))
    try:
        done[case["id"]] = "cubin" in triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm
    except Exception as e:
        done[case["id"]] = repr(e)[:2000]
print(json.dumps(done))
'''

PROLOGUE = {"plain": dict(PRENORM=False, HAS_WA=False, HAS_SCALAR=False, SCALAR_PTR=True, HAS_WB=False, K_PAD=1),
            "add_norm_scalar_tensor": dict(PRENORM=True, HAS_WA=True, HAS_SCALAR=True, SCALAR_PTR=True, HAS_WB=True,
                                           K_PAD=4096),
            "add_norm_number_no_wb": dict(PRENORM=True, HAS_WA=True, HAS_SCALAR=True, SCALAR_PTR=False, HAS_WB=False,
                                          K_PAD=4096)}
NO_TAIL = dict(TAIL=False, T_HAS_WA=False, T_HAS_SCALAR=False, T_SCALAR_PTR=True, T_HAS_WB=False, N_PAD=512)
KERNELS = {"_gemv_kernel": dict(HAS_SCALE=True, HAS_SOFTCAP=True, EXACT_TANH=True, **NO_TAIL),
           "_gemv_gelu_mul_kernel": dict(PAIRED=True, ONE_LOOP=False)}
# the add-norm in the GEMV's last program (kernels/add_norm_tail.py), its loads one chunk ahead too
TAILS = {"tail_scalar_tensor": dict(TAIL=True, T_HAS_WA=True, T_HAS_SCALAR=True, T_SCALAR_PTR=True, T_HAS_WB=True,
                                    N_PAD=4096, AHEAD=True),
         "tail_number_no_wb": dict(TAIL=True, T_HAS_WA=False, T_HAS_SCALAR=True, T_SCALAR_PTR=False, T_HAS_WB=False,
                                   N_PAD=4096, AHEAD=False)}


def test_gemv_kernels_compile_for_sm90_with_and_without_the_add_norm_prologue():
    base = dict(M=1, BLOCK_N=2, BLOCK_K=1024, FIRST_K=1024, PDL=True, W_LINES=0, LINE=64)
    cases = [dict(id=f"{k}/{p}", kernel=k, consts=dict(base, AHEAD=False, **pro, **extra))
             for k, extra in KERNELS.items() for p, pro in PROLOGUE.items()]
    cases += [dict(id=f"_gemv_kernel/{t}", kernel="_gemv_kernel", consts=dict(
        base, **PROLOGUE["plain"], **dict(KERNELS["_gemv_kernel"], **tail))) for t, tail in TAILS.items()]
    # the paired GeGLU's halves in one K loop (PAIR_ONE_LOOP), with each prologue
    cases += [dict(id=f"_gemv_gelu_mul_kernel/one_loop/{p}", kernel="_gemv_gelu_mul_kernel",
                   consts=dict(base, AHEAD=False, **pro, PAIRED=True, ONE_LOOP=True)) for p, pro in PROLOGUE.items()]
    done = compiled(COMPILE, cases)
    assert done == {c["id"]: True for c in cases}


SKINNY = r'''
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import skinny_gemm as K

KERNELS = {"_skinny_gemm_kernel": dict(HAS_SCALE=True, HAS_SOFTCAP=False, EXACT_TANH=True, SWAP=False),
           "_skinny_gemm_gelu_mul_kernel": dict(PAIRED=False, ONE_LOOP=False),
           "_skinny_gemm_gelu_mul_kernel/one_loop": dict(PAIRED=True, ONE_LOOP=True)}  # no split-K: split 1 only
done = {}
for split in json.loads(sys.argv[1]):
    for name, extra in KERNELS.items():
        if name.endswith("one_loop") and split > 1:
            continue
        kernel = getattr(K, name.split("/")[0])
        names = list(inspect.signature(kernel.fn).parameters)
        consts = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, SPLIT=split, FP32=False, PDL=False, W_LINES=0, LINE=64,
                      **extra)
        types = {n: "constexpr" if n in consts else "*fp32" if n == "ws_ptr" else "*i32" if n == "cnt_ptr"
                 else "*bf16" if n.endswith("_ptr") else "fp32" if n in ("scale", "inv_cap", "cap") else "i32"
                 for n in names}
        src = ASTSource(fn=kernel, signature=types, constexprs={(names.index(n),): v for n, v in consts.items()},
                        attrs=aligned(names, types))
        try:
            done[f"{name}/{split}"] = "cubin" in triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm
        except Exception as e:
            done[f"{name}/{split}"] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_skinny_gemm_compiles_for_sm90_with_and_without_split_k():
    """Both skinny kernels' split-K sum (an acquire-release atomic, a barrier, the last program's loads) compiles for SM90, and so
    does the plain kernel it branches from at compile time, and the paired GeGLU's halves in one K loop."""
    done = compiled(SKINNY, [1, 4])
    want = {f"{k}/{s}": True for s in (1, 4) for k in ("_skinny_gemm_kernel", "_skinny_gemm_gelu_mul_kernel")}
    assert done == {**want, "_skinny_gemm_gelu_mul_kernel/one_loop/1": True}


def test_skinny_swap_runs_on_wgmma_for_sm90():
    """swap: W's 64-row tile as the tensor-core dot's M compiles to wgmma on SM90; without it, x's 16 rows as M to
    mma.sync. Split-K's sum compiles with the transposed accumulator too."""
    base = dict(module="kselect.kernels.skinny_gemm", kernel="_skinny_gemm_kernel",
                types=dict(ws_ptr="*fp32", cnt_ptr="*i32", scale="fp32", inv_cap="fp32", cap="fp32"),
                consts=dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, FP32=False, PDL=False, HAS_SCALE=False,
                            HAS_SOFTCAP=True, EXACT_TANH=True, W_LINES=0, LINE=64))
    cases = [dict(base, id=f"{swap}/{split}", consts=dict(base["consts"], SWAP=swap, SPLIT=split))
             for swap in (False, True) for split in (1, 4)]
    for key, ptx in sm90_ptx(cases).items():
        swap = key.startswith("True")
        assert ("wgmma.mma_async" in ptx) == swap and ("mma.sync" in ptx) == (not swap), key


def test_w_prefetch_compiles_for_sm90_before_the_pdl_wait():
    """PREFETCH_W's L2 prefetches (kernels/l2_prefetch.py rows_to_l2) compile for SM90 in both projection kernels and
    come before the PDL wait (weights only); with W_LINES 0, the default, there are none."""
    skinny = dict(module="kselect.kernels.skinny_gemm", kernel="_skinny_gemm_kernel",
                  types=dict(ws_ptr="*fp32", cnt_ptr="*i32", scale="fp32", inv_cap="fp32", cap="fp32"),
                  consts=dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, SPLIT=4, FP32=False, PDL=True, HAS_SCALE=False,
                              HAS_SOFTCAP=False, EXACT_TANH=True, LINE=64, SWAP=False))
    gemv = dict(module="kselect.kernels.gemv", kernel="_gemv_gelu_mul_kernel",
                consts=dict(M=1, BLOCK_N=4, BLOCK_K=256, FIRST_K=256, PAIRED=True, PDL=True, PRENORM=False,
                            HAS_WA=False, HAS_SCALAR=False, SCALAR_PTR=True, HAS_WB=False, K_PAD=1, AHEAD=False,
                            LINE=64))
    cases = [dict(c, id=f"{c['kernel']}/{lines}", consts=dict(c["consts"], W_LINES=lines))
             for c in (skinny, gemv) for lines in (0, 8)]
    for key, ptx in sm90_ptx(cases).items():
        lines = ptx.splitlines()
        pre = [i for i, line in enumerate(lines) if "prefetch.global.L2" in line]
        wait = [i for i, line in enumerate(lines) if "griddepcontrol.wait" in line]
        assert len(wait) == 1, key
        if key.endswith("/0"):
            assert not pre, key
        else:
            assert pre and max(pre) < wait[0], key


TMA = r'''
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import gemv_tma as K

kernel = K._gemv_tma_kernel
names = list(inspect.signature(kernel.fn).parameters)
done = {}
for case in json.loads(sys.argv[1]):
    bn, bk, stages = case["box"]
    consts = dict(BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, GELU=case["gelu"], PAIRED=case["gelu"], HAS_SCALE=True,
                  HAS_SOFTCAP=True, EXACT_TANH=True, PDL=True)
    types = {n: "constexpr" if n in consts else f"tensordesc<bf16[{bn}, {bk}]>" if n == "w_desc" else "*bf16"
             if n.endswith("_ptr") else "fp32" if n in ("scale", "inv_cap", "cap") else "i32" for n in names}
    src = ASTSource(fn=kernel, signature=types, constexprs={(names.index(n),): v for n, v in consts.items()},
                    attrs=aligned(names, types))
    key = f"{bn}x{bk}x{stages}/{case['gelu']}"
    try:
        out = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        # W pipelined: one TMA copy before the PDL wait, the loop's stages after it
        ptx = out.asm["ptx"].splitlines()
        tma = [i for i, line in enumerate(ptx) if "cp.async.bulk.tensor" in line]
        wait = [i for i, line in enumerate(ptx) if "griddepcontrol.wait" in line]
        done[key] = "cubin" in out.asm and len(wait) == 1 and tma[0] < wait[0] and sum(i > wait[0] for i in tma) >= 2
    except Exception as e:
        done[key] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_gemv_tma_compiles_for_sm90_with_w_pipelined_after_a_first_chunk_before_the_wait():
    """kernels/gemv_tma.py on SM90: W comes through TMA copies, the first chunk's before the PDL wait (weights only)
    and the loop's pipelined after it (more than one copy: Triton pipelines descriptor loads, not plain ones), for the
    plain epilogue and the paired GELU*up."""
    cases = [dict(box=box, gelu=gelu) for box in ((8, 256, 4), (2, 256, 3), (16, 128, 6)) for gelu in (False, True)]
    done = compiled(TMA, cases)
    assert done == {f"{b[0]}x{b[1]}x{b[2]}/{g}": True for b in ((8, 256, 4), (2, 256, 3), (16, 128, 6))
                    for g in (False, True)}


EARLY = r'''
import json, sys
from kselect.kernels import rms_norm as K

done = {}
for pdl, early in ((True, False), (2, False), (True, True), (3, False)):
    consts = dict(json.loads(sys.argv[1]), PDL=pdl, RES_EARLY=early, ZERO_Y=False)
    try:
        ptx = sm90_ptx(K._add_rms_norm_kernel, consts,
                       lambda n: "*bf16" if n.endswith("_ptr") else "fp32" if n in ("eps", "scalar") else "i32")
        at = lambda op: [i for i, line in enumerate(ptx) if op in line]
        key = f"{pdl}/res_early" if early else str(pdl)
        done[key] = "release first" if at("launch_dependents")[0] < at("griddepcontrol.wait")[0] else "wait first"
        done[key + "/loads before"] = len([i for i in at("ld.global") if i < at("griddepcontrol.wait")[0]])
        if pdl == 3:  # the late release: after the last load, before the first store
            release = at("launch_dependents")[0]
            done["3/late"] = at("ld.global")[-1] < release < at("st.global")[0]
    except Exception as e:
        done[str(pdl)] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_early_release_orders_the_release_before_the_wait_on_sm90():
    """kernels/pdl.py: PDL == EARLY compiles to griddepcontrol.launch_dependents before griddepcontrol.wait, and
    PDL on to the wait first (the add-norm kernel, which every decode layer runs); PDL == LATE to the wait first and the
    release after the last load, before the first store. With RES_EARLY (kernels/rms_norm.py) the residual's loads join
    the weights' before the wait."""
    consts = dict(HAS_RES=True, HAS_WA=True, HAS_SCALAR=False, SCALAR_PTR=False, HAS_WB=True, BLOCK=4096)
    done = compiled(EARLY, consts)
    weights = done["True/loads before"]
    assert weights > 0 and done["True/res_early/loads before"] == 3 * weights // 2, done  # wa, wb, then res too
    assert {k: v for k, v in done.items() if "loads" not in k} == {"True": "wait first", "2": "release first",
                                                                  "True/res_early": "wait first", "3": "wait first",
                                                                  "3/late": True}


PAIR_COMPILE = r'''
import inspect, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import gated_pair as K

kernel = K._gated_pair_kernel
names = list(inspect.signature(kernel.fn).parameters)
done = {}
for case in json.loads(sys.argv[1]):
    consts = {(names.index(n),): v for n, v in case["consts"].items()}
    types = {n: "constexpr" if (names.index(n),) in consts else "*fp32" if n == "acc_ptr" else "*bf16"
             if n.endswith("_ptr") else "i32" for n in names}
    # what a launch specializes on: 16-byte aligned pointers, sizes and strides divisible by 16
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if types[n] != "constexpr"}
    try:
        ptx = triton.compile(ASTSource(fn=kernel, signature=types, constexprs=consts, attrs=attrs),
                             target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8)).asm["ptx"]
        done[case["id"]] = sorted(set(re.findall(r"red\.global\.[\w.]+", ptx) + re.findall(r"ld\.global\.v4", ptx)))
    except Exception as e:
        done[case["id"]] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_gated_pair_compiles_for_sm90_with_vector_atomics():
    """kernels/gated_pair.py compiles for SM90 in both layouts of the second projection, adds its row with vector
    fp32 reductions (red ... add.v4.f32: a quarter of the atomics of scalar ones) and reads W with 16-byte loads."""
    base = dict(SLICE=4, BLOCK_K=512, N_A=2048, N_B=512, PDL=True)
    cases = [dict(id=f"{lay}/{'mlp' if paired else 'ple'}", consts=dict(base, PAIRED=paired, **{stride: 1}))
             for lay, stride in (("t", "stride_dn"), ("n", "stride_di")) for paired in (True, False)]
    done = compiled(PAIR_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
        assert "red.global.gpu.relaxed.add.v4.f32" in done[c["id"]] and "ld.global.v4" in done[c["id"]], done


ATTN_COMPILE = r'''
import json, re, sys
import triton.language as tl
from kselect.measurement.kernels import attn_sass as S

done = {}
for case in json.loads(sys.argv[1]):
    fp8 = case["fp8"]
    # E4B's batch-1 sliding-layer decode (attn_sass's case), with the case's cache dtype and switches
    consts = dict(S.BASE, **S.CASES["sliding"], HAS_KD=fp8, HAS_VD=fp8, DOT_DTYPE=tl.float16 if fp8 else tl.bfloat16,
                  KV_ASM=fp8, PRE=int(case["pre"]), LINES=2 if fp8 else 4, LINE=128 if fp8 else 64,
                  MERGE=case.get("merge", False), LEAN=case.get("lean", False), POS32=case.get("pos32", False),
                  QKV=case.get("qkv", False), NEW_KV=case.get("qkv", False))
    try:
        ptx = S.compile_sm90(consts, fp8).asm["ptx"]
        wait = ptx.index("griddepcontrol.wait")
        done[case["id"]] = [len(re.findall(r"ld\.global", ptx[:wait])), len(re.findall(r"ld\.global", ptx[wait:])),
                            len(re.findall(r"atom\.global\.gpu\.acq_rel\.add", ptx)),
                            len(re.findall(r"prefetch\.global\.L2", ptx[:wait])),
                            len(re.findall(r"prefetch", ptx[wait:])),
                            len(re.findall(r"cp\.async\.cg", ptx[wait:])),
                            len(re.findall(r"ld\.global\.b32", ptx[wait:ptx.index("st.shared", wait)])),
                            len(re.findall(r"mul\.lo\.s64", ptx)), len(re.findall(r"div\.s64", ptx)),
                            len(re.findall(r"st\.global", ptx[wait:])), len(re.findall(r"rsqrt", ptx))]
    except Exception as e:
        done[case["id"]] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_attention_first_tile_prefetch_compiles_for_sm90_with_loads_before_the_wait():
    """kernels/triton_paged.py's first-tile prefetch (PRE) compiles for SM90, bf16 and FP8 (the inline-asm widening),
    with global loads before the PDL wait (the tables and the tile); without it, none."""
    cases = [dict(id=f"{'pre' if pre else 'plain'}/{'fp8' if fp8 else 'bf16'}", pre=pre, fp8=fp8)
             for pre in (False, True) for fp8 in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
        before, after, atomics, to_l2, late, pipelined = done[c["id"]][:6]
        assert after > 0 and (before > 0 if c["pre"] else before == 0) and atomics == to_l2 == late == 0, done
        assert pipelined > 0, done  # the key loop's K and V tiles copied ahead (cp.async), as a launch compiles it


def test_attention_first_tile_to_l2_compiles_for_sm90_with_prefetches_before_the_wait():
    """The L2 mode of the first-tile prefetch (PRE=2): the tables read and the tile's K and V lines asked of L2
    before the PDL wait (a row's 4 lines in bf16, 2 in FP8, each once per element of the line tensor), no prefetch
    after it; the tile itself is read after the wait as without the prefetch."""
    cases = [dict(id=f"l2/{'fp8' if fp8 else 'bf16'}", pre=2, fp8=fp8) for fp8 in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
        before, after, atomics, to_l2, late = done[c["id"]][:5]
        assert 0 < before < 8 and after > 0 and to_l2 > 0 and late == atomics == 0, done


def test_attention_merge_in_the_last_program_compiles_for_sm90_with_one_acq_rel_ticket():
    """kernels/split_merge.py's merge in the attention's last program compiles for SM90, bf16 and FP8, with the
    prefetch and without: one acquire-release atomic at GPU scope (the ticket), loads only after the PDL wait unless
    the prefetch is on."""
    cases = [dict(id=f"merge/{'pre' if pre else 'plain'}/{'fp8' if fp8 else 'bf16'}", pre=pre, fp8=fp8, merge=True)
             for pre in (False, True) for fp8 in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
        before, after, atomics, to_l2, late = done[c["id"]][:5]
        assert after > 0 and (before > 0 if c["pre"] else before == 0) and atomics == 1, done


def test_attention_lean_start_compiles_for_sm90_with_the_block_ids_asked_for_before_q():
    """kernels/triton_paged.py LEAN_START, bf16 and FP8: after the PDL wait, the scalar loads before q's first store
    to shared memory are the three lengths alone in the plain start, and with the lean start the first tile's block
    ids too (so they do not wait for q's trip to shared memory); the key loop stays cp.async-pipelined."""
    cases = [dict(id=f"{'lean' if lean else 'plain'}/{'fp8' if fp8 else 'bf16'}", pre=0, fp8=fp8, lean=lean)
             for lean in (False, True) for fp8 in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
        pipelined, scalars = done[c["id"]][5:7]
        assert pipelined > 0 and (scalars > 3 if c["lean"] else scalars == 3), done


def test_attention_32_bit_positions_compile_for_sm90_without_64_bit_division():
    """kernels/triton_paged.py POSITIONS_32, bf16 and FP8: with 32-bit positions the split's range needs no 64-bit
    division (the split's range) and fewer 64-bit multiplies (bf16: 23 of 56); the loop stays cp.async-pipelined."""
    cases = [dict(id=f"{'pos32' if pos32 else 'pos64'}/{'fp8' if fp8 else 'bf16'}", pre=0, fp8=fp8, pos32=pos32)
             for pos32 in (False, True) for fp8 in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
    for fp8 in ("bf16", "fp8"):
        wide, narrow = done[f"pos64/{fp8}"], done[f"pos32/{fp8}"]
        assert wide[8] > 0 and narrow[8] == 0 and narrow[7] < wide[7] and narrow[5] > 0, json.dumps(done)


def test_attention_with_raw_qkv_compiles_for_sm90_with_the_norms_and_the_new_rows_store():
    """kernels/attn_qkv.py inside the attention (QKV, NEW_KV), bf16, with the H100's batch-1 switches and without: the
    q rows' and the new k's and v's norms (rsqrt), the new rows stored after the PDL wait beside the partials, and the
    key loop still cp.async-pipelined."""
    cases = [dict(id=f"{'qkv' if qkv else 'q'}/{'rule' if rule else 'plain'}", pre=2 if rule else 0, fp8=False,
                  lean=rule, pos32=rule, qkv=qkv) for qkv in (False, True) for rule in (False, True)]
    done = compiled(ATTN_COMPILE, cases)
    for c in cases:
        assert isinstance(done[c["id"]], list), done[c["id"]]
    for rule in ("plain", "rule"):
        q, qkv = done[f"q/{rule}"], done[f"qkv/{rule}"]
        assert q[10] == 0 and qkv[10] > 0 and qkv[9] > q[9] and qkv[5] > 0, json.dumps(done)


MERGE_LATE = r'''
import json
from kselect.kernels import split_merge as K

done = {}
for pdl in (True, 3):
    consts = dict(S_PAD=32, D=256, D_PAD=256, HAS_SINK=False, PDL=pdl)
    try:
        ptx = sm90_ptx(K._merge_splits, consts,
                       lambda n: "*bf16" if n == "out_ptr" else "*fp32" if n.endswith("_ptr") else "i32")
        at = lambda op: [i for i, line in enumerate(ptx) if op in line]
        wait, release = at("griddepcontrol.wait")[0], at("launch_dependents")[0]
        done[str(pdl)] = [wait < release, release < at("ld.global")[-1], release < at("st.global")[0]]
    except Exception as e:
        done[str(pdl)] = repr(e)[:2000]
print(json.dumps(done))
'''


def test_merge_releases_late_after_its_reads_on_sm90():
    """kernels/split_merge.py's merge: PDL on releases right after the wait, before the partials' loads; PDL == LATE
    after them, before the store."""
    done = compiled(MERGE_LATE, None)
    assert done == {"True": [True, True, True], "3": [True, False, True]}, done


EVICT = r'''
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kselect.kernels import gemv, skinny_gemm

GEMV = dict(M=1, BLOCK_N=2, BLOCK_K=1024, FIRST_K=1024, PDL=True, W_LINES=0, LINE=64, AHEAD=False, PRENORM=False,
            HAS_WA=False, HAS_SCALAR=False, SCALAR_PTR=True, HAS_WB=False, K_PAD=1)
SKINNY = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, FP32=False, PDL=True, W_LINES=0, LINE=64, SPLIT=1)
CASES = {"_gemv_kernel": (gemv, dict(GEMV, HAS_SCALE=False, HAS_SOFTCAP=False, EXACT_TANH=True, TAIL=False,
                                     T_HAS_WA=False, T_HAS_SCALAR=False, T_SCALAR_PTR=True, T_HAS_WB=False, N_PAD=512)),
         "_gemv_gelu_mul_kernel": (gemv, dict(GEMV, PAIRED=True, ONE_LOOP=True)),
         "_skinny_gemm_kernel": (skinny_gemm, dict(SKINNY, HAS_SCALE=False, HAS_SOFTCAP=False, EXACT_TANH=True,
                                                   SWAP=False)),
         "_skinny_gemm_gelu_mul_kernel": (skinny_gemm, dict(SKINNY, PAIRED=True, ONE_LOOP=True))}
FLOATS = ("scale", "inv_cap", "cap", "eps", "t_eps")
done = {}
for evict in json.loads(sys.argv[1]):
    for name, (module, consts) in CASES.items():
        kernel = getattr(module, name)
        consts = dict(consts, EVICT_FIRST=evict)
        names = list(inspect.signature(kernel.fn).parameters)
        types = {n: "constexpr" if n in consts else "*fp32" if n == "ws_ptr" else "*i32" if n == "cnt_ptr"
                 else "fp32" if n in FLOATS else "*bf16" if n.endswith("_ptr") or n.startswith("t_") or n == "scalar"
                 else "i32" for n in names}
        # strides and K divisible by 16, as a launch specializes them: W's tiles then come through cp.async
        attrs = aligned(names, types, {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                                       if n.startswith("stride") or n in ("n", "k", "k_split")})
        ptx = triton.compile(ASTSource(fn=kernel, signature=types, constexprs={
            (names.index(n),): v for n, v in consts.items()}, attrs=attrs), target=GPUTarget("cuda", 90, 32),
            options=dict(num_warps=4, num_stages=4)).asm["ptx"]
        code = [l.strip() for l in ptx.splitlines() if not l.strip().startswith(".loc")]
        done[f"{name}/{evict}"] = dict(policy=sum("createpolicy.fractional.L2::evict_first" in l for l in code),
                                       hinted=sum("L2::cache_hint" in l for l in code),
                                       reads=sum(("ld.global" in l or "cp.async.cg" in l) for l in code))
print(json.dumps(done))
'''


def test_w_evict_first_marks_only_the_weight_reads_for_sm90():
    """kernels/w_evict.py: with EVICT_FIRST every projection kernel makes an evict-first L2 policy and hints W's reads
    with it (ld.global in the GEMV, cp.async in the skinny GEMM's pipeline), and x's reads stay unhinted; without it,
    no read is hinted."""
    done = compiled(EVICT, [False, True])
    names = ("_gemv_kernel", "_gemv_gelu_mul_kernel", "_skinny_gemm_kernel", "_skinny_gemm_gelu_mul_kernel")
    for name in names:
        off, on = done[f"{name}/False"], done[f"{name}/True"]
        assert off["policy"] == off["hinted"] == 0, (name, off)
        assert on["policy"] >= 1 and 0 < on["hinted"] < on["reads"], (name, on)
