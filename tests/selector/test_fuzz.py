"""Fuzzing every command line with malformed input (issue #15): a generated table, fixed seed.

Every case is invalid by construction. Each one runs the command's own `main` in-process
through the shared error path (`selector.cli.call_main`, what `kselect <cmd>` runs) and must:
exit 2; print one paragraph on stderr that names the key or file (`names`); print no traceback
and no "internal error" (the bug marker of call_main). The process stays under
2 GiB (max RSS, checked after each chunk). Config-file content (rules, capabilities, model
presets) is fuzzed through `api.validate`, the validator every command runs on a composed
config, because a Hydra compose per case would cost minutes. A few cases run as real
subprocesses, each held to 2 GiB of RSS (os.wait4); no time bound (that is a benchmark's). The table's size is asserted
(>= 2,000 command lines, the config contents and real processes on top). Cost: about 70 CPU-s on
the 2-core CI machine (bench/results/selector/fuzz_time/README.md), mostly one Hydra compose
(~0.3 s) for each case that gets past the guard.

Issue #40 adds classes generated with hypothesis (fuzz_classes.py: the command table, the strategies over the
CLI grammar and the config schema), derandomized, EXAMPLES per (command, class), through the same checker:
about 20 CPU-s more on a shared 2-core machine (59 -> 81 CPU-s for the file with -n 2, user + sys).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kselect_inprocess import kselect_main, missing

import fuzz_classes
from kselect.selector.api import compose_raw, validate
from kselect.selector.base.cli_errors import call_main
from kselect.selector.base.errors import KSelectError, SelectionError
from kselect.selector.api import resolve

ROOT = Path(__file__).resolve().parents[2]
SEED = 15
CHUNKS = 4
MAX_RSS_KB = 2 << 20  # 2 GiB


@dataclass
class Case:
    cli: str
    argv: list[str]
    names: tuple[str, ...]  # at least one must appear in the message: the key or file
    files: dict[str, str | bytes | None] = field(default_factory=dict)  # relative path -> content (None: a dir)
    links: dict[str, str] = field(default_factory=dict)  # relative path -> symlink target
    via_app: bool = False  # through `kselect <cli>` itself (its Hydra app), not the command's in-process main
    missing: tuple[str, ...] = ()  # modules made unimportable for the case (an optional extra not installed)

    def id(self) -> str:
        return f"{self.cli} {' '.join(self.argv)}"[:160]


# ---------------------------------------------------------------- the table

GROUPS = ["platform", "model", "kv_cache", "spec_decode", "attention", "capabilities", "rules", "overlay"]
BAD_NAMES = ["../x", "..", "a/b", "/etc/passwd", "-x", "a" * 80, "x..y", ".hidden", "x*", "sm90/../../y", "é", "a b"]
INTERP = ["${oc.env:HOME}", "${oc.decode:1}", "${now:%Y}", "${model.hidden_size}", "'${a}'", "x${b}y"]
VALUE_KEYS = ["model.head_dim", "output", "kv_cache.block_size", "platform.gpu_model", "rules.priority.cuda.reason",
              "+attention.backend_per_kind.full_attention", "model.name", "overlays.x"]
HYDRA = ["hydra.searchpath=[file:///tmp]", "hydra.callbacks.x._target_=os.system", "+hydra.callbacks.x._target_=os.system",
         "hydra/job_logging=disabled", "hydra.run.dir=/tmp/x", "hydra.verbose=true", "hydra.job.env_set.X=1"]
PARSE = ["a=[", "=x", "a=]", "model.head_dim=[1,", "+", "~", "a==", "x=(", "key=val'", "platform=sm80,,", "a={b", "@x=1",
         "overlay@x=pr48666"]
OVERLAYS = ["pr48666", "pr52987", "pr53175"]
# every order of distinct shipped overlays except the five that tell the seed's story
# ([], [pr48666], [pr48666,pr52987], [pr53175], [pr48666,pr52987,pr53175]): 11 contradictory lists
STORY = {(), ("pr48666",), ("pr48666", "pr52987"), ("pr53175",), ("pr48666", "pr52987", "pr53175")}
CONTRADICTORY = [",".join(p) for n in (1, 2, 3) for c in itertools.combinations(OVERLAYS, n)
                 for p in itertools.permutations(c) if p not in STORY]  # fmt: skip
WHY = ("reverts", "replaces")  # the message says which declaration the list contradicts


DANGER = "./\\*?~`|;&<>!%^"


def random_bad_name(rng: random.Random) -> str:
    """A name with at least one character no conf/ file name may hold."""
    chars = [rng.choice("abcxyz09_" + DANGER) for _ in range(rng.randint(1, 10))]
    chars.insert(rng.randrange(len(chars) + 1), rng.choice(DANGER))
    return "".join(chars)


def _override_cases(cli: str, rng: random.Random, n_random: int = 14) -> list[Case]:
    out = []
    names = BAD_NAMES + [random_bad_name(rng) for _ in range(n_random)]
    for g, bad in itertools.product(GROUPS, names):
        value = f"[{bad}]" if g == "overlay" and rng.random() < 0.5 else bad
        out.append(Case(cli, ["platform=sm90", f"{g}={value}"], (g,)))
    for key, v in itertools.product(VALUE_KEYS, INTERP):
        out.append(Case(cli, ["platform=sm90", f"{key}={v}"], (key.lstrip("+"),)))
    for h in HYDRA:
        out.append(Case(cli, ["platform=sm90", h], ("hydra",)))
    for p in PARSE:
        out.append(Case(cli, ["platform=sm90", p], (p,)))
    for perm in itertools.permutations(OVERLAYS + [rng.choice(OVERLAYS)]):
        out.append(Case(cli, ["platform=sm90", f"overlay=[{','.join(perm)}]"], ("repeats",)))
    for ov in CONTRADICTORY:
        out.append(Case(cli, ["platform=sm90", "rules=post_pr52987", f"overlay=[{ov}]"], WHY))
    return out


# values that need a Hydra compose: few, each a documented bound or type
VALUE_CASES = [
    ("model.head_dim", ["0", "-1", "1000000000000", "true", "x", "1.5", "null", "[1]", "2048"]),
    ("model.num_hidden_layers", ["0", "1000000000000", "513", "x"]),
    ("model.vocab_size", ["0", "99999999999"]),
    ("model.intermediate_size", ["1000000000", "-5"]),
    ("model.rms_norm_eps", ["nan", "inf", "0", "-1"]),
    ("platform.compute_capability", ["[-9,0]", "[99,0]", "[9]", "x", "[9,0,1]", "[9,10]"]),
    ("kv_cache.block_size", ["0", "2048", "-1", "x"]),
    ("spec_decode.num_speculative_tokens", ["17", "-1"]),
    ("attention.flash_attn_version", ["1", "5", "x"]),
    ("attention.backend", ["NOPE", "''"]),
    ("+attention.backend_per_kind.full_attention", ["NOPE"]),
    ("+attention.backend_per_kind.bogus", ["FLASH_ATTN"]),
    ("output", ["xml"]),
    ("verbose", ["maybe"]),
    ("nonsense", ["1"]),
    ("+nonsense", ["1"]),
    ("platform.gpu_model", ["NVIDIA H200", "UPPER"]),
    ("platform.vendor", ["amd", "ibm"]),
    ("platform.name", ["a b"]),
    ("model.num_kv_shared_layers", ["100"]),
    ("model.layer_types", ["[sliding_attention]", "[x]"]),
    ("platform", ["nope"]),
    ("model", ["gemma5"]),
]


def _value_cases(cli: str) -> list[Case]:
    out = [Case(cli, ["platform=sm90", f"{k}={v}"], (k.lstrip("+").split(".")[-1], k.lstrip("+"))) for k, vs in VALUE_CASES for v in vs]
    out += [
        # vLLM ignores this pin (no FlashAttention on SM80): kselect warns; strict=true refuses it
        Case(cli, ["platform=sm80", "attention.flash_attn_version=3", "strict=true"], ("attention.flash_attn_version",)),
        Case(cli, ["platform=sm90", "model=gemma4_tiny", "model.full_attention_every=6"], ("model.num_kv_shared_layers",)),
        Case(cli, ["platform=cpu", "platform.packages.fa4=maybe"], ("platform.packages",)),
    ]
    return out


def _diff_cases(rng: random.Random) -> list[Case]:
    out = []
    revs = ["--output=/tmp/kselect-victim", "-x", "--remote=.", "a..b", "HEAD x", "", "HEAD;ls", "$(id)", "`id`", "nope-rev"]
    revs += ["-" + random_bad_name(rng) for _ in range(20)] + [random_bad_name(rng) + " --x" for _ in range(10)]
    for r in revs:
        for side in ("a", "b"):
            out.append(Case("diff", [f"{side}.conf=git:{r}", "matrix=smoke"], ("git",)))
    for bad in BAD_NAMES[:8]:
        out.append(Case("diff", [f"a.overlay=[{bad}]", "b.overlay=[]", "matrix=smoke"], ("overlay",)))
        out.append(Case("diff", [f"b.overlay=[{bad}]", "matrix=smoke"], ("overlay",)))
        out.append(Case("diff", [f"matrix={bad}"], ("matrix",)))
        out.append(Case("diff", ["a.conf=git:HEAD", f"conf_path={bad}"], ("conf",)))
    for perm in itertools.permutations(OVERLAYS + [rng.choice(OVERLAYS)]):
        out.append(Case("diff", [f"b.overlay=[{','.join(perm)}]", "matrix=smoke"], ("repeats",)))
    for ov, side in itertools.product(CONTRADICTORY, "ab"):
        out.append(Case("diff", [f"{side}.overlay=[{ov}]", "matrix=smoke"], WHY))
    for arg, name in [("format=xml", "format"), ("check=maybe", "check"), ("limit=x", "limit"), ("limit=-1", "limit"),
                      ("limit=99999999", "limit"), ("conf_path=--exec=id", "conf"), ("repo=/nonexistent/x", "repo"),
                      ("unknown=1", "unknown"), ("noequals", "noequals"), ("a.conf=weird", "weird"), ("matrix=nope", "nope"),
                      ("a=[]", "a.overlay"), ("overlays=[pr48666]", "a.overlay")]:
        out.append(Case("diff", ["b.overlay=[pr48666]", arg], (name,)))
    return out


MATRIX_BASE = {"axes": {"platform": ["sm90"], "model": ["gemma4_31b"]}, "pins": {"auto": {}}}
MATRIX_MUTATIONS: list[tuple[Callable[[dict], object], str]] = [
    (lambda d: d["axes"].update(bogus=["x"]), "bogus"),
    (lambda d: d["axes"].update(platform=[]), "platform"),
    (lambda d: d["axes"].update(platform=["sm90", "sm90"]), "platform"),
    (lambda d: d["axes"].update(platform="sm90"), "axes"),
    (lambda d: d["axes"].update(platform=[1, 2]), "platform"),
    (lambda d: d["axes"].update(multimodal=["yes"]), "multimodal"),
    (lambda d: d["axes"].pop("model"), "model"),
    (lambda d: d["axes"].update(platform=["../x"]), "platform"),
    (lambda d: d["axes"].update(model=["a/b"]), "model"),
    (lambda d: d.update(pins={}), "pins"),
    (lambda d: d.update(pins={"bad name": {}}), "pin"),
    (lambda d: d.update(pins={"p": {"nosection": 1}}), "pins"),
    (lambda d: d.update(pins={"p": "x"}), "pins"),
    (lambda d: d.update(skip=[{"when": {"bogus": 1}, "reason": "r"}]), "skip"),
    (lambda d: d.update(skip=[{"when": {"platform": "sm42"}, "reason": "r"}]), "skip"),
    (lambda d: d.update(skip=[{"when": {}, "reason": ""}]), "skip"),
    (lambda d: d.update(skip="x"), "skip"),
    (lambda d: d.update(extra_key=1), "extra_key"),
    (lambda d: d.update(overlays="x"), "overlays"),
    (lambda d: d.update(axes=None), "axes"),
]
BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)
BAD_YAML_FILES: list[tuple[str | bytes, str]] = [
    ("", "empty"), ("[", "YAML"), ("- a\n- b\n", "list"), ("just text", "str"), (BOMB, "alias"), ("[" * 200 + "]" * 200, "deep"),
    (b"\xff\xfe\x00bad", "unreadable"), ("a: 1\na: 2\n", "a"), ("{a: [}", "YAML"), ("key: !!python/object:os.system x", "YAML"),
]


def _matrix_file_cases(cli: str, extra: list[str]) -> list[Case]:
    out = []
    for mut, name in MATRIX_MUTATIONS:
        d = copy.deepcopy(MATRIX_BASE)
        mut(d)
        out.append(Case(cli, ["matrix=m.yaml", *extra], (name, "m.yaml"), files={"m.yaml": json.dumps(d)}))
    for text, name in BAD_YAML_FILES:
        out.append(Case(cli, ["matrix=m.yaml", *extra], ("m.yaml",), files={"m.yaml": text}))
    out.append(Case(cli, ["matrix=m.yaml", *extra], ("m.yaml",), links={"m.yaml": "missing.yaml"}))
    out.append(Case(cli, ["matrix=m.yaml", *extra], ("m.yaml",), files={"m.yaml": None}))
    return out


def _matrix_cases(rng: random.Random) -> list[Case]:
    out = _matrix_file_cases("matrix", ["format=ids"])
    for bad in BAD_NAMES:
        out.append(Case("matrix", [f"matrix={bad}"], ("matrix",)))
        out.append(Case("matrix", ["matrix=smoke", f"overlay=[{bad}]"], ("overlay",)))
    for arg, name in [("format=xml", "format"), ("matrix=nope", "nope"), ("x=1", "x"), ("overlay=[pr48666,pr48666]", "overlay"),
                      ("overlays=[pr48666]", "overlay=")]:
        out.append(Case("matrix", [arg], (name,)))
    for ov in CONTRADICTORY:
        out.append(Case("matrix", ["matrix=smoke", f"overlay=[{ov}]"], WHY))
    return out


def _plot_cases(tmp: str) -> list[Case]:
    out = _matrix_file_cases("plot", [f"out={tmp}/p"])
    for w, name in [("where.platform=sm42", "platform"), ("where.bogus=1", "bogus"), ("where.platform", "where"),
                    ("where.platform=sm90,sm42", "sm42"), ("where.pin=nope", "pin")]:
        out.append(Case("plot", ["matrix=smoke", w, f"out={tmp}/p"], (name,)))
    for arg, name in [("a=[pr48666]", "a.overlay"), ("b=[pr48666]", "b.overlay"), ("title", "title"), ("x=1", "x"),
                      ("overlay=[../x]", "overlay"), ("matrix=../x", "matrix"), ("style=bars", "style")]:
        out.append(Case("plot", [arg, f"out={tmp}/p"], (name,)))
    out.append(Case("plot", ["matrix=smoke", "out=outdir"], ("out",), files={"outdir": None}))
    for ov in CONTRADICTORY:
        out.append(Case("plot", [f"b.overlay=[{ov}]", "matrix=smoke", f"out={tmp}/p"], WHY))
    return out


def _sweep_cases(rng: random.Random) -> list[Case]:
    out = []
    for opt in ["--config-dir=/tmp", "-cd", "/tmp", "--experimental-rerun=x.pickle", "--cfg", "job", "-c", "--info", "-cp",
                "--config-name=x", "--hydra-help", "--shell-completion", "-p", "--run"]:
        if opt.startswith("-"):
            out.append(Case("sweep", ["-m", opt, "platform=cpu"], (opt.split("=")[0],)))
    for h in ["hydra.callbacks.x._target_=os.system", "+hydra.callbacks.x._target_=builtins.open",
              "hydra.searchpath=[file:///tmp]", "hydra/callbacks=x", "hydra/launcher=../x", "hydra.job.env_set.X=1",
              "hydra/sweeper=../../x", "hydra.sweep.dir=${oc.env:HOME}"]:
        out.append(Case("sweep", ["-m", "platform=cpu,sm90", h], ("hydra",)))
    names = BAD_NAMES + [random_bad_name(rng).replace(",", "") for _ in range(20)]
    for g, bad in itertools.product(["platform", "model", "overlay", "kv_cache"], names):
        out.append(Case("sweep", ["-m", f"{g}=sm90,{bad}" if g != "overlay" else f"{g}=[pr48666],[{bad}]"], (g,)))
    for key, v in itertools.product(VALUE_KEYS, INTERP[:3]):
        out.append(Case("sweep", ["-m", "platform=cpu", f"{key}={v}"], (key.lstrip("+"),)))
    for perm in itertools.permutations(OVERLAYS + [rng.choice(OVERLAYS)]):
        out.append(Case("sweep", ["-m", f"overlay=[pr53175],[{','.join(perm)}]"], ("repeats",)))
    for ov in CONTRADICTORY:
        out.append(Case("sweep", ["-m", "rules=post_pr52987", f"overlay=[pr53175],[{ov}]"], WHY))
    for p in PARSE:
        out.append(Case("sweep", ["-m", p], (p,)))
    out.append(Case("sweep", ["-m", "matrix=../x"], ("matrix",)))
    out.append(Case("sweep", ["-m", "matrix=nope"], ("nope",)))
    out.append(Case("sweep", ["-m", "platform=cpu", "hydra.sweep.dir=used"], ("used",),
                    files={"used/0/selection.json": "{}"}))
    return out


def _job(num: int, jobs: int = 2, sweep: str = "s1", **kw) -> dict:
    rec = {"overrides": ["platform=cpu"], "outcome": "invalid", "error": "x", "job": {"num": num, "launcher": "basic"},
           "sweep": {"id": sweep, "jobs": jobs}}
    rec.update(kw)
    return rec


def _gather_cases(rng: random.Random) -> list[Case]:
    out = []
    good = {"0/selection.json": json.dumps(_job(0)), "1/selection.json": json.dumps(_job(1))}
    junk = [None, True, 1, -1, "x", [], {}, [1], {"a": 1}, 1.5]
    fields = ["overrides", "outcome", "selection", "error", "job", "sweep"]
    for f, v in itertools.product(fields, junk):
        rec = _job(1)
        rec[f] = v
        if f == "selection" and v is None:
            continue  # a job whose outcome is not ok has no selection: valid
        if f == "error" and (v is None or isinstance(v, str)) or f == "overrides" and v == []:
            continue  # valid
        out.append(Case("gather", ["d"], ("1/selection.json",), files={**good, "1/selection.json": json.dumps(rec)}))
    for v in [None, True, -1, 7, "x", 1.5]:
        rec = _job(1)
        rec["job"] = {"num": v}
        names = ("job",) if isinstance(v, int) and not isinstance(v, bool) else ("1/selection.json",)
        out.append(Case("gather", ["d"], names, files={**good, "1/selection.json": json.dumps(rec)}))
    out.append(Case("gather", ["d"], ("1/selection.json",), files={**good, "1/selection.json": json.dumps(_job(1, job={"launcher": "x"}))}))
    for k in fields:
        rec = _job(1)
        if k in ("selection", "error"):
            continue
        rec.pop(k)
        out.append(Case("gather", ["d"], ("1/selection.json",), files={**good, "1/selection.json": json.dumps(rec)}))
    ok_groups = [[{"kind": "x"}], "x", [1], [{}], {"a": 1}]
    for g in ok_groups:
        rec = _job(1, outcome="ok", selection={"groups": g})
        rec.pop("error")
        out.append(Case("gather", ["d"], ("1/selection.json",), files={**good, "1/selection.json": json.dumps(rec)}))
    texts = ["", "{", "[]", "null", "1", '"x"', "{'a': 1}", '{"a": NaN}', "\x00", '{"overrides": [' * 50]
    for t in texts:
        out.append(Case("gather", ["d"], ("1/selection.json",), files={**good, "1/selection.json": t}))
    for i in range(160):  # mixed sweeps, missing and repeated jobs
        n = rng.randint(2, 6)
        files = {f"{j}/selection.json": json.dumps(_job(j, n)) for j in range(n)}
        kind = i % 4
        if kind == 0:
            j = rng.randrange(n)
            files[f"{j}/selection.json"] = json.dumps(_job(j, n, sweep="s2"))
            names: tuple[str, ...] = ("mixes",)
        elif kind == 1:
            files.pop(f"{rng.randrange(n)}/selection.json")
            names = ("missing",)
        elif kind == 2:
            files[f"extra/{rng.randrange(n)}/selection.json"] = json.dumps(_job(rng.randrange(n), n))
            names = ("repeated",)
        else:
            files[f"{n}/selection.json"] = json.dumps(_job(n + 3, n))
            names = ("unexpected",)
        out.append(Case("gather", ["d"], names, files=files))
    out.append(Case("gather", ["d", "format=xml"], ("format",), files=good))
    out.append(Case("gather", ["d", "x=1"], ("x",), files=good))
    out = [Case(c.cli, c.argv, c.names, {f"d/{k}": v for k, v in c.files.items()}) for c in out]
    out.append(Case("gather", ["nonexistent"], ("nonexistent",)))
    out.append(Case("gather", ["f"], ("f",), files={"f": "x"}))
    out.append(Case("gather", ["d"], ("selection.json",), files={"d/x": "1"}))
    out.append(Case("gather", ["d"], ("selection.json",), links={"d/0/selection.json": "missing"}))
    return out


CLAIM_PARTS = dict(backend=["TRITON_ATTN", "FLASH_ATTN_v4", "FLASHINFER"], dtype=["bf16", "fp8"], head=["d64", "d256"],
                   feature=["causal", "window", "page16"])
BAD_CLAIM_PARTS = dict(backend=["triton", "", "FLASH ATTN", "1X"], dtype=["bf8", "", "int4"],
                       head=["d0", "d99999", "dx", "64", "d-1", "d2048"], feature=["page0", "page99999", "causalx", "", "pagex"])


def _conformance_cases(rng: random.Random) -> list[Case]:
    out = []
    base = ["--gpu-name", "cpu_fuzz", "--device", "cpu", "--out", "o.yaml"]
    for part, bads in BAD_CLAIM_PARTS.items():
        for bad in bads:
            parts = {k: rng.choice(v) for k, v in CLAIM_PARTS.items()}
            parts[part] = bad
            cid = ":".join(parts[k] for k in ("backend", "dtype", "head", "feature"))
            out.append(Case("conformance", ["--claims", cid, *base], ("--claims",)))
            out.append(Case("conformance", ["--claims", "c.yaml", *base], ("c.yaml",), files={"c.yaml": f"- {cid}\n"}))
    for _ in range(120):  # one part of a valid id replaced by junk
        parts = {k: rng.choice(v) for k, v in CLAIM_PARTS.items()}
        part = rng.choice(list(parts))
        parts[part] = rng.choice(BAD_CLAIM_PARTS[part]) if rng.random() < 0.5 else random_bad_name(rng).replace(",", "")
        cid = ":".join(parts[k] for k in ("backend", "dtype", "head", "feature"))
        out.append(Case("conformance", ["--claims", "c.txt", *base], ("c.txt",), files={"c.txt": cid + "\n"}))
    for v in ["FLASH_ATTN_v9:bf16:d64:causal", "FLASH_ATTN_v1:bf16:d64:causal", "TRITON_ATTN:bf16:d64:causal:extra",
              "TRITON_ATTN:bf16:d64:causal,TRITON_ATTN:bf16:d64:causal", ",", "x" * 300]:
        out.append(Case("conformance", ["--claims", v, *base], ("--claims",)))
    for text, _ in BAD_YAML_FILES:
        if text in ("just text", "- a\n- b\n", "a: 1\na: 2\n"):
            continue  # text claim files: their ids are refused instead (below)
        out.append(Case("conformance", ["--claims", "c.yaml", *base], ("c.yaml",), files={"c.yaml": text}))
    out.append(Case("conformance", ["--claims", "c.yaml", *base], ("c.yaml",), files={"c.yaml": "just text"}))
    out.append(Case("conformance", ["--claims", "missing/c.txt", *base], ("missing/c.txt",)))
    out.append(Case("conformance", ["--claims", "c.yaml", *base], ("c.yaml",), links={"c.yaml": "nowhere"}))
    ok = "TORCH_REFERENCE:bf16:d64:causal"
    for args, name in [(["--jobs", "0"], "--jobs"), (["--jobs", "-1"], "--jobs"), (["--jobs", "1000"], "--jobs"),
                       (["--jobs", "x"], "--jobs"), (["--device", "tpu"], "--device"), (["--device", "cuda"], "cuda"),
                       (["--bogus"], "--bogus"), (["--gpu-name", "NVIDIA H200"], "--gpu-name"),
                       (["--gpu-name", "../x"], "--gpu-name"), (["--gpu-name", "nvidia_h200"], "--gpu-name")]:
        argv = ["--claims", ok, "--device", "cpu", "--out", "o.yaml", "--gpu-name", "cpu_fuzz", *args]
        out.append(Case("conformance", argv, (name,)))
    out.append(Case("conformance", ["--claims", ok, "--device", "cpu"], ("--out",)))
    out.append(Case("conformance", ["--out", "o.yaml", "--device", "cpu"], ("--claims",)))
    out.append(Case("conformance", ["--claims", ok, *base[:4], "--out", "odir"], ("odir",), files={"odir": None}))
    good = "gpu: cpu_fuzz\nclaim_count: 1\nclaims:\n  TORCH_REFERENCE:bf16:d64:causal: {status: verified, rel_err: 0.001}\n"
    existing = [
        "", "gpu: cpu_fuzz\n", good.replace("claim_count: 1", "claim_count: 2"), good.replace("verified", "verifed"),
        good.replace("gpu: cpu_fuzz", "gpu: other_gpu"), good + "  extra_key: 1\n", good.replace("rel_err: 0.001", "rel_err: -1"),
        good.replace("rel_err: 0.001", "rel_err: .nan"), good.replace("claim_count: 1\n", ""), good[: len(good) // 2],
        good.replace("TORCH_REFERENCE:bf16:d64:causal", "not a claim"), good + "bogus: 1\n", "[1, 2]", BOMB,
        good.replace("status: verified", "status: [verified]"), good.replace("gpu: cpu_fuzz", "gpu: ../x"),
    ]
    for text in existing:
        out.append(Case("conformance", ["--claims", ok, *base], ("o.yaml",), files={"o.yaml": text}))
    out.append(Case("conformance", ["--claims", ok, *base], ("o.yaml",), links={"o.yaml": "gone.yaml"}))
    return out


def _run_cases(rng: random.Random) -> list[Case]:
    out = []
    for args, name in [(["--max-new-tokens", "x"], "--max-new-tokens"), (["--prefill-chunk", "0"], "--prefill-chunk"),
                       (["--prefill-chunk", "-3"], "--prefill-chunk"), (["--temperature", "x"], "--temperature"),
                       (["--top-k", "x"], "--top-k"), (["--seed", "x"], "--seed"), (["--bogus"], "--bogus"),
                       (["--prompt"], "--prompt")]:
        out.append(Case("run", ["platform=cpu", *args], (name,)))
    for g, bad in itertools.product(["platform", "model", "kv_cache", "overlay"], BAD_NAMES[:6]):
        out.append(Case("run", [f"{g}={bad}"], (g,)))
    for key, v in itertools.product(VALUE_KEYS[:4], INTERP[:2]):
        out.append(Case("run", ["platform=cpu", f"{key}={v}"], (key,)))
    for ov in CONTRADICTORY:
        out.append(Case("run", ["platform=cpu", "rules=post_pr52987", f"overlay=[{ov}]"], WHY))
    return out


def _checkpoint_cases() -> list[Case]:
    """Malformed checkpoint folders: config.json, tokenizer.json, weights. One compose each (few)."""
    hf = json.loads((ROOT / "tests" / "gemma4" / "tiny_hf_config.json").read_text()) if (ROOT / "tests" / "gemma4" / "tiny_hf_config.json").exists() else None
    base = hf or {"model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                  "global_head_dim": 64, "sliding_window": 16, "max_position_embeddings": 1024}
    configs = ["[]", "null", "{", "1", json.dumps(dict(base, intermediate_size=200000)), json.dumps(dict(base, num_key_value_heads=0)),
               json.dumps(dict(base, vocab_size=10**12)), json.dumps(dict(base, num_hidden_layers=10**9)),
               json.dumps(dict(base, head_dim=-1)), json.dumps(dict(base, model_type="llama")),
               json.dumps({k: v for k, v in base.items() if k != "hidden_size"}), json.dumps(dict(base, rope_parameters=[1]))]
    out = []
    for c in configs:
        out.append(Case("run", ["platform=cpu", "model.checkpoint=ck", "--no-check", "--max-new-tokens", "1"],
                        ("ck",), files={"ck/config.json": c, "ck/tokenizer.json": "{}"}))
    out.append(Case("run", ["platform=cpu", "model.checkpoint=ck"], ("ck",), files={"ck/config.json": json.dumps(base), "ck/model.bin": b"\x80\x02"}))
    out.append(Case("run", ["platform=cpu", "model.checkpoint=nowhere"], ("nowhere",)))
    return out


def table() -> dict[str, list[Case]]:
    rng = random.Random(SEED)
    cases = {
        "select": _override_cases("select", rng),
        "select-values": _value_cases("select"),
        "claims": _override_cases("claims", rng),
        "diff": _diff_cases(rng),
        "matrix": _matrix_cases(rng),
        "plot": _plot_cases("plots"),
        "sweep": _sweep_cases(rng),
        "gather": _gather_cases(rng),
        "conformance": _conformance_cases(rng),
        "run": _run_cases(rng),
        "run-checkpoint": _checkpoint_cases(),
        "run-overrides": _override_cases("run", rng),  # kselect run's Hydra app: the same overrides as select
    }
    return cases


TABLE = table()


def _main(cli: str):
    if cli == "select":
        from kselect.commands.select import main
    elif cli == "claims":
        from kselect.commands.claims import main
    elif cli == "diff":
        from kselect.commands.diff import main
    elif cli == "matrix":
        from kselect.commands.matrix import main
    elif cli == "plot":
        from kselect.commands.plot import main
    elif cli == "sweep":
        from kselect.commands.sweep import main
    elif cli == "gather":
        from kselect.commands.gather import main
    elif cli == "conformance":
        from kselect.commands.conformance import main
    elif cli == "run":
        from kselect.commands.run import main, user_errors

        return user_errors(main)
    return main


def _materialize(case: Case, root: Path) -> None:
    for rel, content in case.files.items():
        p = root / rel
        if content is None:
            p.mkdir(parents=True, exist_ok=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if content == b"FIFO":  # a named pipe: a read of it would block for ever
            os.mkfifo(p)
            continue
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    for rel, target in case.links.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(root / target)


class Hang(BaseException):
    """A case that ran past HANG_S (a FIFO read, a loop): a failure, never a wait."""


HANG_S = 120  # CPU-bound cases take seconds on the 2-core CI machine; a blocked read never ends


def _hang(signum, frame):
    raise Hang(f"still running after {HANG_S} s")


def check(case: Case, root: Path, capsys) -> str | None:
    """None if the case behaved; else what went wrong. It runs in `root` with HOME an empty folder beside it: any
    file made in HOME (a cache) or a marker a script would write (fuzz_classes.MARKER) is a failure."""
    root.mkdir(parents=True)
    _materialize(case, root)
    home = root.parent / f"{root.name}_home"
    home.mkdir()
    cwd, argv, saved_home = os.getcwd(), sys.argv[:], os.environ.get("HOME")
    os.chdir(root)
    os.environ["HOME"] = str(home)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(HANG_S)
    try:
        with missing(*case.missing):
            code = call_main(kselect_main(case.cli) if case.via_app else _main(case.cli.split("-")[0]), list(case.argv))
    except BaseException as e:  # noqa: BLE001 - anything escaping call_main is a failure
        return f"raised {e.__class__.__name__}: {e}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
        sys.argv[:] = argv
        os.environ.pop("KSELECT_DEBUG", None)
        if saved_home is not None:
            os.environ["HOME"] = saved_home
    out, err = capsys.readouterr()
    if any(root.rglob(fuzz_classes.MARKER)):
        return f"ran code it was given: {fuzz_classes.MARKER} written"
    if list(home.iterdir()):
        return f"wrote outside the working folder: {[p.name for p in home.iterdir()]} in HOME"
    if code != 2:
        return f"exit {code} (want 2); stderr: {err[-300:]!r}"
    if "Traceback" in err or "Traceback" in out:
        return f"traceback: {err[-300:]!r}"
    if "internal error" in err:
        return f"a bug, not a user error: {err[-300:]!r}"
    if "\n\n" in err.strip():
        return f"more than one paragraph: {err!r}"
    if not any(n.lower() in err.lower() for n in case.names):
        return f"message names none of {case.names}: {err[-300:]!r}"
    return None


def _chunks():
    for cli, cases in TABLE.items():
        n = CHUNKS if len(cases) > 100 or cli == "select-values" else 1  # select-values: a compose each
        for i in range(n):
            yield pytest.param(cli, i, n, id=f"{cli}-{i}")


@pytest.mark.parametrize("cli,i,n", list(_chunks()))
def test_malformed_input_exits_2_naming_the_key(cli, i, n, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KSELECT_DEBUG", raising=False)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))  # matplotlib's own cache, not kselect's
    monkeypatch.setenv("KSELECT_FUZZ", "1")
    cases = TABLE[cli][i::n]
    failures = []
    for k, case in enumerate(cases):
        why = check(case, tmp_path / str(k), capsys)
        if why:
            failures.append(f"{case.id()}: {why}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert not failures, f"{len(failures)}/{len(cases)} cases failed:\n" + "\n".join(failures[:15])
    assert rss < MAX_RSS_KB, f"max RSS {rss / 1024:.0f} MiB"


def test_the_table_is_large_and_fixed():
    counts = {cli: len(cases) for cli, cases in TABLE.items()}
    assert sum(counts.values()) >= 2000, counts  # command lines alone; CONF_CASES and SUBPROCESS come on top
    assert all(n >= 10 for n in counts.values()), counts
    assert [c.id() for c in table()["gather"]] == [c.id() for c in TABLE["gather"]]  # deterministic


# ---------------------------------------------------------------- generated classes (issue #40, fuzz_classes.py)

# hypothesis draws these per (command, class) of fuzz_classes.COMMANDS, derandomized: the same cases every run
EXAMPLES = {"group_value": 3, "hydra_key": 1, "rule_fact": 1, "prompt_ascii": 1, "prompt_multibyte": 1, "path": 4,
            "extra": 1, "schema_value": 8, "hf_config": 7, "hf_json": 6, "checkpoint_json": 8, "special_path": 4,
            "control_char": 3, "script_path": 2}
IN_PROCESS = ("select", "claims", "diff", "matrix", "plot", "sweep", "gather", "conformance", "run")  # _main has them


def _long_prompt_bounds() -> tuple[int, int]:
    """(the tiny model's context, the most bytes one token of the bundled tokenizer covers)."""
    from kselect.gemma4.checkpoint import load_tokenizer

    tok = load_tokenizer()
    longest = max(len(tok.decode([i]).encode()) for i in tok.get_vocab().values())
    return compose_raw(["model=gemma4_tiny"])["model"]["max_position_embeddings"], longest


def _strategy(cli: str, cls: str):
    if cls.startswith("prompt_"):
        return fuzz_classes.prompt(cli, *_long_prompt_bounds(), multibyte=cls == "prompt_multibyte")
    return fuzz_classes.STRATEGIES[cls](cli)


@pytest.mark.parametrize("cli,cls", fuzz_classes.pairs(), ids=[f"{c}-{k}" for c, k in fuzz_classes.pairs()])
def test_generated_bad_input_exits_2_naming_the_key(cli, cls, capsys, monkeypatch, tmp_path_factory):
    monkeypatch.delenv("KSELECT_DEBUG", raising=False)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path_factory.mktemp("mpl")))  # matplotlib's own cache, not kselect's
    monkeypatch.setenv("KSELECT_FUZZ", "1")
    strategy = _strategy(cli, cls)
    seen: list[str] = []

    @settings(max_examples=EXAMPLES[cls], derandomize=True, database=None, deadline=None, print_blob=False,
              phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure reports its case as drawn, quickly
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.data())
    def one(data):
        g = data.draw(strategy)
        app = g.via_app and (cls in fuzz_classes.APP_CLASSES or cli not in IN_PROCESS)
        case = Case(g.cli, g.argv, g.names, g.files, g.links, via_app=app, missing=g.missing)
        seen.append(case.id())
        why = check(case, tmp_path_factory.mktemp("case") / "c", capsys)
        assert why is None, f"{case.id()}: {why}; files: {str(case.files)[:300]}"

    one()
    assert seen, "no case drawn"


# ---------------------------------------------------------------- config-file content (rules, capabilities, presets)

BASE = compose_raw(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"])
INT_JUNK = [-1, 0, 10**12, True, "x", 1.5, None, [1], {"a": 1}]
MODEL_INTS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "global_head_dim", "sliding_window", "max_position_embeddings"]
RULE_FIELDS = {"stage": ["nope", 1, None, []], "reason": ["", None, 1, []], "when": ["x", 1, [1], {"bogus.fact": 1},
               {"platform.cc_major": {"zz": 1}}, {"any": "x"}, {"not": 1}], "order": [10**9, "x", True, None],
               "enabled": ["maybe", 2, None], "priority": [[], ["NOPE"], "x", [1]], "kernel_block_sizes": [[], [0], [10**6], "x", [{"multiple_of": 0}]],
               "preferred_block_size_min": [0, 10**6, "x"], "descale": ["x", 1], "flash_attn_version": [1, 5, "x", {"from": 1}],
               "quant_query": ["maybe", 2], "copy_target_kv_scales": ["x"], "set": ["x", {"backend": "NOPE"}, {"bogus": 1}],
               "bogus_field": [1]}  # fmt: skip
CAP_FIELDS = {"devices": ["cuda", ["tpu"], [1], None], "dtypes": [["int4"], "x", None], "kv_cache_dtypes": ["x", None, [1]],
              "head_sizes": ["x", {"max": 0}, {"only": []}, {"min": -1}, {"only": [10**6]}, {"bogus": 1}],
              "kernel_block_sizes": [[], [0], ["x"], [{"multiple_of": -1}], "x"], "min_compute_capability": [[-1, 0], [9], "x", [99, 0]],
              "max_compute_capability": [[9, 99], "x"], "mm_prefix": ["maybe", 2], "package": ["pip", 1], "extra": [1]}  # fmt: skip
PLATFORM_FIELDS = {"compute_capability": [[-9, 0], [9], [99, 0], "x", [9, 0, 1]], "vendor": ["ibm", 1], "device": ["tpu", 1],
                   "gpu_model": ["../x", "A B", "x" * 100], "name": ["a/b", ""], "packages": ["x", {"fa9": True}, {"fa4": "maybe"}]}  # fmt: skip


def _conf_cases() -> list[tuple[str, Callable[[dict], None], str]]:
    """(label, mutation of the composed dict, a key the error must name)."""
    out: list[tuple[str, Callable[[dict], None], str]] = []
    for f, v in itertools.product(MODEL_INTS, INT_JUNK):  # every junk value is out of bounds or not an int
        out.append((f"model.{f}={v!r}", lambda d, f=f, v=v: d["model"].__setitem__(f, v), f))
    for f, v in itertools.product(["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"], INT_JUNK):
        out.append((f"model.drafter.{f}={v!r}", lambda d, f=f, v=v: d["model"]["drafter"].__setitem__(f, v), f))
    for f, v in itertools.product(["num_kv_shared_layers", "full_attention_every", "num_global_key_value_heads",
                                   "hidden_size_per_layer_input"], [-1, 10**9, True, "x", 1.5, [1]]):
        out.append((f"model.{f}={v!r}", lambda d, f=f, v=v: d["model"].__setitem__(f, v), f))
    for f, v in itertools.product(["rms_norm_eps", "rope_theta_full", "partial_rotary_factor_full", "final_logit_softcapping"],
                                  [float("nan"), float("inf"), -1.0, 0.0, "x", True, 1e300]):
        out.append((f"model.{f}={v!r}", lambda d, f=f, v=v: d["model"].__setitem__(f, v), f))
    for rid, (f, vs) in itertools.product(["priority.cuda", "fa.version.config", "new.rule"], RULE_FIELDS.items()):
        for v in vs:
            def mut(d, rid=rid, f=f, v=v):
                d["rules"].setdefault(rid, {"stage": "reject", "reason": "fuzz"})[f] = v
            out.append((f"rules.{rid}.{f}={v!r}", mut, "rules"))
    for b, (f, vs) in itertools.product(["FLASH_ATTN", "TRITON_ATTN", "NEW"], CAP_FIELDS.items()):
        for v in vs:
            def mut(d, b=b, f=f, v=v):
                d["capabilities"].setdefault(b, {"devices": ["cuda"], "dtypes": ["bfloat16"], "kv_cache_dtypes": ["auto"]})[f] = v
            out.append((f"capabilities.{b}.{f}={v!r}", mut, "capabilities"))
    for f, vs in PLATFORM_FIELDS.items():
        for v in vs:
            out.append((f"platform.{f}={v!r}", lambda d, f=f, v=v: d["platform"].__setitem__(f, v), "platform"))
    for f, vs in {"dtype": ["int8", 1], "scales": ["x"], "block_size": [0, 2048, "x", True]}.items():
        for v in vs:
            out.append((f"kv_cache.{f}={v!r}", lambda d, f=f, v=v: d["kv_cache"].__setitem__(f, v), "kv_cache"))
    for top, v in [("output", "xml"), ("verbose", "maybe"), ("bogus", 1), ("overlays", "x"), ("attention", "x"), ("rules", [])]:
        out.append((f"{top}={v!r}", lambda d, top=top, v=v: d.__setitem__(top, v), top))
    return out


CONF_CASES = _conf_cases()


@pytest.mark.parametrize("part", range(2))
def test_malformed_config_files_name_the_key(part):
    failures = []
    for label, mut, key in CONF_CASES[part::2]:
        d = copy.deepcopy(BASE)
        mut(d)
        try:
            resolve(validate(d))
        except SelectionError as e:
            if not str(e).strip():
                failures.append(f"{label}: empty selection error")
        except KSelectError as e:
            if key.split(".")[0] not in str(e):
                failures.append(f"{label}: message does not name {key}: {e}")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{label}: {e.__class__.__name__}: {e}")
        else:
            failures.append(f"{label}: accepted")
    assert not failures, f"{len(failures)} of {len(CONF_CASES[part::2])}:\n" + "\n".join(failures[:20])


# ---------------------------------------------------------------- real processes

SUBPROCESS = [
    ["select", "platform=sm90", "+attention.backend_per_kind.full_attention=NOPE"],
    ["select", "platform=sm90", "overlay=[pr48666,pr52987,pr48666]"],
    ["select", "platform=sm90", "rules=post_pr52987", "overlay=[pr48666,pr53175]"],
    ["diff", "a.conf=git:--output=/tmp/kselect-fuzz-victim", "matrix=smoke"],
    ["sweep", "-m", "--experimental-rerun=config.pickle"],
    ["gather", "/nonexistent/dir"],
    ["conformance", "--claims", "X:bf16:d99999:causal", "--out", "o.yaml", "--device", "cpu"],
    ["run", "platform=cpu", "--prefill-chunk", "0"],
    ["bogus-command"],
    # issue #49: a special file, a version with a newline (refused before any download), a prompt that is not UTF-8
    ["select", "platform=sm90", "model=hf", "model.hf_config=/proc/self/mem"],
    ["oracle", "0.34.0\n"],
    # refusals added since (a key the mode ignores, a claim no file holds, a rendering the command lacks, a number no
    # timing means, a key added to a mapping without '+', MTP layers kselect does not model)
    ["plot", "a.overlay=[pr48666]", "out=p"],
    ["matrix", "format=ids", "overlay=[nope]"],
    ["diff", "a.objective=nope"],
    ["conformance", "--claims", "NOPE:bf16:d64:causal", "--out", "o.yaml", "--device", "cpu"],
    ["explain", "platform=sm90", "output=vllm"],
    ["claims", "platform=sm90", "output=markdown"],
    ["run", "platform=cpu", "output=json"],
    ["perf", "--gpu-name", "nvidia_h200", "--platform", "sm90", "--dry-run", "--context-spread", "5"],
    ["select", "platform=sm90", "attention.backend_per_kind.sliding_window=TRITON_ATTN"],
    ["select", "platform=sm90", "model=deepseek_v3", "spec_decode=mtp"],
    ["run", "platform=cpu", "--prompt", "\udcff"],
]


def run_measured(argv: list[str], cwd: Path) -> tuple[int, str, float, int]:
    """`python -m kselect ARGV` in a real process: (exit status, stderr, CPU seconds, max RSS in KiB)
    of that process alone (os.wait4's rusage; CPU time, not wall time, so a loaded machine does not
    fail it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KSELECT_VLLM_HOME": str(cwd / "vllm_cache")}  # the oracle's cache
    env.pop("KSELECT_DEBUG", None)
    with open(cwd / ".stderr", "w+") as err:
        p = subprocess.Popen([sys.executable, "-m", "kselect", *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        timer = threading.Timer(120, p.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return p.returncode, err.read(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss


@pytest.mark.parametrize("path,says", [("x" * 300, "a path component of 300 bytes"),
                                        ("/".join(["d" * 200] * 25), "a path of 5024 bytes")], ids=["name", "path"])
def test_gather_refuses_a_path_too_long_to_name_in_a_real_process(path, says, tmp_path):
    # the OSError the file system would raise (ENAMETOOLONG) is exit 3 in a real process; the check makes it bad input
    code, err, _, _ = run_measured(["gather", path], tmp_path)
    assert code == 2, err[-1000:]
    assert err.startswith("kselect: gather: ") and says in err and "allowed: at most" in err, err[-1000:]
    assert "Traceback" not in err and "internal error" not in err and len(err.strip().splitlines()) == 1, err[-1000:]


@pytest.mark.parametrize("argv", SUBPROCESS, ids=[a[0] for a in SUBPROCESS])
def test_real_processes_exit_2_without_traceback(argv, tmp_path):
    code, err, _, rss_kb = run_measured(argv, tmp_path)  # its CPU time is a benchmark's, never a test's
    assert code == 2, err[-1000:]
    assert "Traceback" not in err and "internal error" not in err, err[-1000:]
    assert err.strip() and "\n\n" not in err.strip()
    assert rss_kb < MAX_RSS_KB, f"max RSS {rss_kb / 1024:.0f} MiB"
    assert not (tmp_path / "vllm_cache").exists()  # nothing downloaded or built for bad input
