"""The SM90 code of E4B's batch-1 decode attention, counted on a CPU machine (issue #52).

kernels/triton_paged.py's `_attn_fwd` as the small launch runs it at batch 1 (4 query heads a KV head, one 32-key
tile a program, split, PDL, 4 warps, 2 stages) is compiled ahead of time for SM90 with Triton's own assembler, as a
launch specializes it (pointers and strides 16-byte aligned), and its SASS (Triton's bundled `cuobjdump`) counted:
every instruction, and by kind (STL: register spills). One row a layer kind (sliding d256 with its window, full d512)
and switch: the plain start, the lean start (LEAN_START), 32-bit positions (POSITIONS_32), the H100's batch-1 rule
(those two with the first tile's lines into L2), and the rule with 16-key tiles (attn_n16) or with q/k/v's norms
and rope inside (kernels/attn_qkv.py), or with 32-bit cache offsets (OFFSETS_32). Instruction counts are not
times; they say what the kernel's own chain is made of (bench/results/h200/attn_floor/).

    python3 -m kselect.measurement.kernels.attn_sass --out $OUT/S

Writes --out/attn_sass.json and attn_sass.md atomically with the command, commit and Triton's version. Exits 2 with
one line where this Triton has no SM90 assembler or `cuobjdump`.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {"sliding": dict(D=256, D_PAD=256, HAS_WINDOW=True), "full": dict(D=512, D_PAD=512, HAS_WINDOW=False)}
RULE = dict(PRE=2, LEAN=True, POS32=True)  # kernels/triton_paged.py PDL_DECODE_BY_CARD's H100 entry
SWITCHES = {"plain": {}, "lean": dict(LEAN=True), "pos32": dict(POS32=True), "rule": RULE,
            "rule_n16": dict(RULE, BLOCK_N=16), "rule_qkv": dict(RULE, QKV=True, NEW_KV=True),
            "rule_off32": dict(RULE, OFF32=True)}
# E4B at batch 1 on the small launch (kernels/triton_paged.py small_decode): bf16, page 16
BASE = dict(G=4, G_PAD=4, BLOCK_Q=4, BLOCK_N=32, PAGE=16, CAUSAL=True, HAS_QPOS=False, NUM_SPANS=0, HAS_SINK=False,
            HAS_QD=False, HAS_KD=False, HAS_VD=False, SPLIT=True, IEEE=False, KV_ASM=False, PDL=True, PRE=0, LINES=4,
            LINE=64, MERGE=False, S_PAD=32, LEAN=False, POS32=False, QKV=False, NEW_KV=False, OFF32=False)
KINDS = {"HMMA": ("HMMA",), "LDGSTS": ("LDGSTS",), "LDG": ("LDG",), "STG": ("STG",), "BAR": ("BAR",), "STL": ("STL",),
         "integer": ("IMAD", "LEA", "ISETP", "IADD3")}
ADDRESS = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?[A-Z]")  # an instruction's address
BRANCH = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)")
INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")  # address, predicate, opcode
FP32 = ("ws_acc_ptr", "ws_ml_ptr", "sink_ptr", "qd_ptr", "kd_ptr", "vd_ptr")
# the raw q/k/v path's inputs (kernels/attn_qkv.py): the norm weights, rope tables and the cache it writes, bf16
BF16 = ("q_ptr", "out_ptr", "qw_ptr", "kw_ptr", "cos_ptr", "sin_ptr", "kcw_ptr", "vcw_ptr")


class NoAssembler(Exception):
    """This Triton build cannot assemble or disassemble SM90 code."""


def _types(names: list[str], consts: dict, kv: str) -> dict:
    return {n: "constexpr" if n in consts else kv if n in ("k_ptr", "v_ptr") else "*bf16" if n in BF16
            else "*fp32" if n in FP32 else "*i64" if n == "slot_ptr" else "*i32" if n.endswith("_ptr")
            else "fp32" if n in ("sm_scale_log2", "eps") else "i32" for n in names}


def compile_sm90(consts: dict, fp8: bool = False):
    """`_attn_fwd` compiled for SM90 (Triton's CompiledKernel: its .asm["ptx"], ["cubin"]) with these constexprs
    (DOT_DTYPE bf16 unless given), a bf16 or FP8 cache, 4 warps and 2 stages, pointers and strides 16-byte aligned as
    a launch marks them. NoAssembler where this Triton cannot assemble SM90 code."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kselect.kernels import triton_paged

    kernel = triton_paged._attn_fwd
    names = list(inspect.signature(kernel.fn).parameters)
    consts = {"DOT_DTYPE": tl.bfloat16, **consts}
    types = _types(names, consts, "*fp8e4nv" if fp8 else "*bf16")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if types[n].startswith("*") or n.startswith("stride")}
    src = ASTSource(fn=kernel, signature=types, constexprs={(names.index(n),): v for n, v in consts.items()},
                    attrs=attrs)
    try:
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=2))
    except Exception as e:  # noqa: BLE001 - Triton raises its own types; only the assembler's absence is ours
        if "ptxas" in str(e):
            raise NoAssembler(f"this Triton ({triton.__version__}) has no SM90 assembler (ptxas)") from e
        raise


def cubin(consts: dict) -> bytes:
    """The bf16 kernel's SM90 binary (compile_sm90)."""
    return compile_sm90(consts).asm["cubin"]


def _cuobjdump() -> Path:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        raise NoAssembler(f"no cuobjdump beside this Triton ({tool})")
    return tool


def sass(binary: bytes) -> str:
    """A cubin's `cuobjdump -sass` text."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(binary)
        return subprocess.run([str(_cuobjdump()), "-sass", str(path)], capture_output=True, text=True,
                              check=True).stdout


def loop(text: str) -> int:
    """Instructions in the body of the longest loop of `cuobjdump -sass` text (from a backward branch's target to the
    branch): the key loop, which a program runs once a key tile; 0 without a backward branch."""
    addrs = [int(m.group(1), 16) for m in map(ADDRESS.match, text.splitlines()) if m]
    spans = [(int(to, 16), int(at, 16)) for at, to in BRANCH.findall(text) if int(to, 16) <= int(at, 16)]
    if not spans:
        return 0
    lo, hi = max(spans, key=lambda span: span[1] - span[0])
    return sum(lo <= a <= hi for a in addrs)


def parse(text: str) -> list[str]:
    """The opcodes of `cuobjdump -sass` text: each `/*0040*/ [@P0] OPCODE.MODS operands ;` line's OPCODE (the
    predicate and modifiers dropped); headers, encodings and labels are not instructions."""
    ops = []
    for line in text.splitlines():
        m = INSTRUCTION.match(line)
        if m:
            ops.append(m.group(1))
    return ops


def count(ops: list[str]) -> dict:
    by = collections.Counter(ops)
    return dict(instructions=len(ops), **{k: sum(by[o] for o in names) for k, names in KINDS.items()})


def measure() -> list[dict]:
    rows = []
    for case, shape in CASES.items():
        for switch, on in SWITCHES.items():
            text = sass(cubin({**BASE, **shape, **on}))
            rows.append(dict(case=case, switch=switch, **count(parse(text)), loop=loop(text)))
    return rows


def render(rows: list[dict], env: dict) -> str:
    out = ["# E4B's batch-1 decode attention, its SM90 instructions", "",
           f"`{env['command']}` at `{env['git_commit']}`, Triton {env['triton']} (compiled on a CPU machine)", "",
           "`_attn_fwd` of kernels/triton_paged.py as the small launch runs it at batch 1 (one 32-key tile a program, "
           "bf16, 4 warps, 2 stages, PDL). `integer`: IMAD, LEA, ISETP and IADD3; `STL`: register spills; `key loop`: "
           "the instructions a program runs again for each further key tile (batch 16 runs about four).", "",
           "| layer kind | switch | instructions | " + " | ".join(KINDS) + " | key loop |",
           "|---|---|---:|" + "---:|" * (len(KINDS) + 1)]
    for r in rows:
        out.append(f"| {r['case']} | {r['switch']} | {r['instructions']:,} | "
                   + " | ".join(f"{r[k]:,}" for k in KINDS) + f" | {r['loop']:,} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kselect.measurement.kernels.attn_sass",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for attn_sass.json and attn_sass.md")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("attn_sass: unset TRITON_INTERPRET (the interpreter's kernels do not compile)", file=sys.stderr)
        return 2
    from kselect.measurement.e2e.environment import environment
    from kselect.selector.base.files import atomic_write

    try:
        rows = measure()
    except NoAssembler as e:
        print(f"attn_sass: {e}", file=sys.stderr)
        return 2
    env = environment(sys.argv[1:] if argv is None else argv, script="-m kselect.measurement.kernels.attn_sass")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "attn_sass.json", json.dumps(dict(env=env, rows=rows), indent=1))
    md = render(rows, env)
    atomic_write(args.out / "attn_sass.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
