"""Capability conformance: run a claimed kernel capability on a small realistic paged case and
compare it with the fp32 reference.

A tool above the layers: it reads claims with the selector's vocabulary
(`kselect.selector.config.vocab.Claim`: `<backend>[_v<fa version>]:<dtype>:d<head>:<feature>`, e.g.
`FLASH_ATTN_v4:fp8:d256:window`), takes each claim's descale mode and page size from the
selection of that kernel path (`kselect.selector.measure.claims.claim_runs`: the rules decide, e.g. FA4's
FP8 path dequantizes K/V in the kernel on 64-token pages), and drives the real backend adapter
(`kselect.backends`) over the kernels. Each claim runs two batches (chunked prefill with unequal
lengths, and decode), GQA.

status: verified (rel_err within kernels/tolerances.py), refuted (over it, or NaN),
unsupported (the backend or kernel raised; detail = the first line of the error), unavailable
(never run: the backend's package is missing here). kernel: the library build that ran, where a
backend has several (FA3: a `+upstream` claim runs flash-attention's hopper build, any other FA3 claim vLLM's or
the one KSELECT_FA3_BUILD names; FA4: flash-attn-4 or the fork). kernel_versions (the file's top): the kernel
library versions the claims ran with (vLLM's FA build, flash-attn-4, flashinfer, triton, the release of vLLM's
Triton kernel), merged with what an existing file named (kselect/measurement/measured_versions.py).

CLI (kselect/commands/conformance.py): kselect conformance --claims FILE_OR_LIST --gpu-name NAME --out PATH.yaml
[--jobs N] [--platform P] (FILE: a YAML list or one id per line; LIST: comma-separated ids). On CPU, TRITON_ATTN claims
run in the Triton interpreter (keep heads small there). --jobs N runs kernel families (claims
sharing backend, version, dtype and head size, hence one JIT-compiled kernel) in N processes:
FlashInfer's and FA4's first-call compiles then overlap. A family whose process dies (a kernel
that aborts) is re-run claim by claim; a claim that still kills its process is refuted.
"""

from __future__ import annotations

import datetime
import math
import os
import re
from dataclasses import dataclass, replace

import torch

from kselect.measurement import measured_versions
from kselect.selector.config.detect import gpu_model_key
from kselect.kernels.dtypes import torch_dtype
from kselect.selector.measure.claims import claim_runs
from kselect.selector.outputs.records import ClaimRun
from kselect.selector.config.vocab import Claim, parse_claim


def _cases(c: Claim, run: ClaimRun, device: str):
    from kselect.kernels.cases import make_case

    small = device == "cpu"
    hkv = 1 if c.head >= 512 else 2
    hq = 4 * hkv
    window = {True: 15, False: 255}[small] if c.feature == "window" else -1
    if small:
        batches = [([5, 9, 3], [21, 40, 9]), ([1, 1, 1], [33, 70, 5])]
    else:
        batches = [([256, 64, 300], [900, 64, 1300]), ([1, 1, 1, 1], [700, 1500, 90, 4100])]
    cache_dtype = torch_dtype(c.kv_cache_dtype) if c.kv_cache_dtype else None
    # FP8 descales per (sequence, kv head) where the backend declares them, else one K and one V per layer
    descale = "seq_head" if run.per_head_scales else "layer"
    out = []
    for i, (ql, kl) in enumerate(batches):
        spans = None
        if c.feature == "mm_prefix":
            spans = [[(max(0, k - q - 4), max(0, k - q - 4) + min(12, k))] for q, k in zip(ql, kl)]
        out.append(make_case(ql, kl, hq=hq, hkv=hkv, d=c.head, block_size=run.page, dtype=torch_dtype(c.model_dtype),
                             cache_dtype=cache_dtype, descale=descale, window_left=window, mm_spans=spans,
                             sinks=c.feature == "sinks", device=device, seed=11 + i))
    return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def check_claim(claim_id: str, device: str = "cuda", run: ClaimRun | None = None) -> dict:
    """Run one claim; `run` (descale mode, page size) defaults to the selector's for this machine."""
    from kselect.backends import BackendUnavailableError, make_backend
    from kselect.backends.fixtures import layer_of, make_group, meta_of
    from kselect.kernels.cache_ops import quantize_query
    from kselect.kernels.tolerances import rel_err, tolerance

    c = parse_claim(claim_id)
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    run = run or claim_runs([claim_id], _platform(device))[claim_id]
    page, descale = run.page, run.descale
    kv = c.kv_cache_dtype or c.model_dtype
    try:
        be = make_backend(make_group(c.backend, c.version, c.head, kv, page, page, descale, 1 if c.head >= 512 else 2,
                                     build=c.build))
    except BackendUnavailableError as e:
        return dict(status="unavailable", rel_err=None, detail=_first_line(e))
    except Exception as e:  # noqa: BLE001 - an adapter refusing the combination is a finding
        return dict(status="unsupported", rel_err=None, detail=_first_line(e))
    tol = tolerance(torch_dtype(c.model_dtype), c.fp8)
    kernel = dict(kernel=be.kernel_build) if be.kernel_build else {}
    if be.kernel_versions:
        kernel["versions"] = dict(be.kernel_versions)
    worst = 0.0
    for case in _cases(c, run, device):
        qs = torch.tensor(0.05, device=device) if descale == "q_k_v" else None
        try:
            out = be.forward(case.q, case.k_cache, case.v_cache, meta_of(case), layer_of(case, qs))
            if device != "cpu":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            return dict(status="unsupported", rel_err=None, detail=_first_line(e), **kernel)
        q_in = quantize_query(case.q, qs, case.k_cache.dtype) if qs is not None else None
        ref = case.reference(q=q_in, q_descale=qs, out_dtype=torch.float32)
        err = rel_err(out, ref)
        if math.isnan(err):
            return dict(status="refuted", rel_err=None, detail="non-finite output", **kernel)
        worst = max(worst, err)
    ok = worst <= tol
    return dict(status="verified" if ok else "refuted", rel_err=float(f"{worst:.3e}"),
                detail=f"max rel_err {worst:.2e} {'<=' if ok else '>'} tol {tol:g} over chunked prefill + decode, "
                       f"page {page}, descale {descale}", **kernel)


def read_claims(arg: str) -> list[str]:
    """Claim ids from a file (a YAML list, a mapping with `claims:`, or one id per line) or a
    comma-separated list; every id is checked before anything runs."""
    from kselect.selector.base.errors import KSelectError
    from kselect.selector.base.files import load_yaml

    if os.path.exists(arg) or os.path.islink(arg):
        data = load_yaml(arg, "a list of claim ids")
        if isinstance(data, dict):
            data = data.get("claims", data)
        if data is None:
            raise KSelectError(f"--claims {arg}: empty; expected claim ids (a YAML list or one per line)")
        items = list(data) if isinstance(data, (list, dict)) else str(data).split()
        where = f"--claims {arg}"
    else:
        if "/" in arg or arg.endswith((".txt", ".yaml", ".yml")):
            raise KSelectError(f"--claims {arg}: no such file; expected a file of claim ids or a comma-separated list")
        items, where = arg.split(","), "--claims"
    ids = [str(x).strip() for x in items if str(x).strip() and not str(x).startswith("#")]
    if not ids:
        raise KSelectError(f"{where}: no claim ids; expected <backend>[_v<N>]:<dtype>:d<head>:<feature>, e.g. TRITON_ATTN:bf16:d256:causal")
    for cid in ids:
        try:
            parse_claim(cid)
        except ValueError as e:
            raise KSelectError(f"{where}: {e}; dtype bf16|fp16|fp32|fp8|fp8_e5m2, feature causal|window|mm_prefix|sinks|quant_query|page<N>") from None
    dups = sorted({c for c in ids if ids.count(c) > 1})
    if dups:
        raise KSelectError(f"{where}: repeats {', '.join(dups[:5])}; allowed: each claim once")
    return ids


def check_paths(ids: list[str], platform: list[str]) -> None:
    """Every claim names a kernel path a file could hold: a backend of the capabilities, and a FlashAttention version
    exactly where the backend is FLASH_ATTN (as `kselect claims` writes them). A typo is bad input, exit 2, not a
    claim recorded as unsupported or unavailable."""
    from kselect.selector.base.errors import KSelectError
    from kselect.selector.config.compose import compose

    backends = sorted(compose(platform).capabilities)
    for cid in ids:
        c = parse_claim(cid)
        if c.backend not in backends:
            raise KSelectError(f"--claims: {cid}: no backend {c.backend!r} in the capabilities; allowed: {', '.join(backends)}")
        if (c.backend == "FLASH_ATTN") != (c.version is not None):
            raise KSelectError(f"--claims: {cid}: " + ("a FLASH_ATTN claim names its version, e.g. FLASH_ATTN_v3:..."
                               if c.version is None else f"only FLASH_ATTN takes a version (_v{c.version}); "
                               f"allowed: {c.backend}:{c.dtype}:d{c.head}:{c.feature}"))


def device_model(device: str) -> str:
    """This machine's GPU model as conformance files name it (conf/conformance/<model>.yaml)."""
    if device == "cpu":
        return "cpu"
    return gpu_model_key(torch.cuda.get_device_name())


def check_gpu_name(gpu: str, device: str) -> None:
    from kselect.selector.base.errors import KSelectError

    if not re.fullmatch(r"[a-z0-9][a-z0-9_]{0,63}", gpu):
        raise KSelectError(f"--gpu-name {gpu!r}; allowed: lower-case letters, digits and '_' (a file name in conf/conformance/)")
    have = device_model(device)
    if not (gpu == have or (device == "cpu" and gpu.startswith("cpu"))):
        raise KSelectError(f"--gpu-name {gpu!r} does not match this device ({have}); allowed: {have!r}"
                           + (" or a name starting with 'cpu'" if device == "cpu" else ""))


def merge_plan(old: dict, new_ids: list[str]) -> str:
    kept = [c for c in old if c not in new_ids]
    rerun = [c for c in new_ids if c in old]
    added = [c for c in new_ids if c not in old]
    return f"{len(rerun)} re-run (replaced), {len(added)} new, {len(kept)} kept from the existing file"


def merge_report(old: dict, results: dict) -> list[str]:
    lines = []
    for cid, r in results.items():
        before = old.get(cid)
        if before is None:
            lines.append(f"  new      {cid}: {r['status']}")
        elif before["status"] != r["status"]:
            lines.append(f"  changed  {cid}: {before['status']} -> {r['status']}")
    return lines


@dataclass(frozen=True)
class ConformanceRun:
    """What `kselect conformance` runs (kselect/commands/conformance.py maps its flags to these fields)."""

    claims: str  # a file of claim ids (read_claims) or a comma-separated list
    out: str  # the conformance file; an existing one is merged into (re-run claims replaced)
    gpu_name: str | None = None  # default: this device's (device_model)
    device: str | None = None  # cuda | cpu; default: cuda where available
    jobs: int = 1  # processes, one kernel family each at a time (1..64)
    platform: str | None = None  # the selector's platform for descale/page; default: auto (cpu on device cpu)
    missing: bool = False  # only the claims `out` does not hold yet


def _checked(opts: ConformanceRun) -> ConformanceRun:
    """The options with the device resolved; bad input raises KSelectError before any claim runs."""
    from kselect.selector.base.errors import KSelectError
    from kselect.selector.base.files import check_out_path, safe_name

    opts = replace(opts, device=opts.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not 1 <= opts.jobs <= 64:
        raise KSelectError(f"--jobs {opts.jobs}; allowed: 1 to 64")
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise KSelectError("--device cuda: this machine has no CUDA device; allowed: cpu")
    if opts.platform is not None:
        safe_name(opts.platform, "--platform")
    if opts.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    gpu = opts.gpu_name or device_model(opts.device)
    check_gpu_name(gpu, opts.device)
    out_path = os.path.abspath(opts.out)
    if os.path.isdir(out_path):
        raise KSelectError(f"--out {opts.out}: a directory; expected a .yaml file")
    check_out_path(out_path, "--out")  # under a file: refused before the claims run
    return replace(opts, gpu_name=gpu)


def run(opts: ConformanceRun, command: str) -> int:
    """Run the claims and merge them into `opts.out` after each one (atomically); `command` is recorded in the file."""
    from kselect.selector.evidence.conformance_data import read_file
    from kselect.selector.base.files import atomic_write

    import yaml

    opts = _checked(opts)
    gpu, out_path = opts.gpu_name, os.path.abspath(opts.out)
    ids = read_claims(opts.claims)
    old: dict = {}
    old_versions: dict = {}
    if os.path.exists(out_path) or os.path.islink(out_path):  # merge: never drop what was measured before
        prev = read_file(out_path, gpu=gpu)
        old = {cid: r.model_dump() for cid, r in prev.claims.items()}
        old_versions = dict(prev.kernel_versions)
        if opts.missing:
            ids = [cid for cid in ids if cid not in old]
        print(f"merging into {opts.out} ({len(old)} claims): {merge_plan(old, ids)}", flush=True)
    platform = [f"platform={opts.platform}"] if opts.platform else _platform(opts.device)
    check_paths(ids, platform)
    runs = {cid: _run_of(cid, platform) for cid in ids}  # the selector decides; workers only run kernels
    results: dict = {}
    doc = dict(gpu=gpu, torch=str(torch.__version__), measured=datetime.date.today().isoformat(), kernel_versions={},
               commit=_git_commit(), command=command)
    have = measured_versions.installed()  # the kernel libraries here (metadata only: no imports)

    def write(order: list[str]) -> None:
        claims = dict(old)
        claims.update({cid: results[cid] for cid in order if cid in results})
        kv = kernel_versions(old, old_versions, results, have)
        atomic_write(out_path, yaml.safe_dump(dict(doc, kernel_versions=kv, claim_count=len(claims), claims=claims),
                                              sort_keys=False))

    def record(cid, r):
        results[cid] = r
        # [done/total]: the progress of a run that takes minutes (each line also goes to a log)
        print(f"[{len(results)}/{len(ids)}] {cid:44s} {r['status']:11s} rel_err={r['rel_err']}  {r['detail']}", flush=True)
        write(list(results))  # after every claim, atomically: a timeout still leaves what was measured

    for cid, r in _results(ids, opts.device, runs, opts.jobs):
        record(cid, r)
    write(ids)  # input order, whatever finished first
    changes = merge_report(old, results) if old else []
    print(f"wrote {opts.out}: {len(old) + sum(c not in old for c in results)} claims ({merge_plan(old, ids) if old else f'{len(results)} new'})"
          + (":" if changes else "; no status changed"))
    for line in changes:
        print(line)
    return 0


def _results(ids: list[str], device: str, runs: dict, jobs: int):
    """(claim, result) as each finishes: in order in this process, or by family in `jobs` processes."""
    if jobs <= 1:
        for cid in ids:
            yield cid, _check_one(cid, device, runs[cid])
        return
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(jobs) as pool:  # each family in its own process (_isolated)
        futures = [pool.submit(_isolated, fam, device, runs) for fam in families(ids)]
        for fut in cf.as_completed(futures):
            yield from fut.result()


def _records(claims: dict) -> list[tuple[str, str, dict]]:
    """(kernel path, build that ran, the claim's own versions) of claims that ran a kernel (not `unavailable`)."""
    return [(cid.split(":", 1)[0], r.get("kernel") or "", r.get("versions") or {}) for cid, r in claims.items()
            if r.get("status") != "unavailable"]


def kernel_versions(old: dict, old_versions: dict, results: dict, have: dict | None = None) -> dict[str, str]:
    """The file's `kernel_versions` once `results` (this run's claims) are merged over `old` (the file's claims,
    which said `old_versions`): kselect/measurement/measured_versions.py."""
    kept = {cid: r for cid, r in old.items() if cid not in results}
    return measured_versions.merge(old_versions, measured_versions.run_versions(_records(results), have),
                                   measured_versions.used(_records(kept)))


def _platform(device: str) -> list[str]:
    return ["platform=cpu"] if device == "cpu" else ["platform=auto"]


def _run_of(cid: str, platform: list[str]) -> ClaimRun | ValueError:
    try:
        return claim_runs([cid], platform)[cid]
    except ValueError as e:  # a malformed id: reported as that claim's result
        return e


def _check_one(cid: str, device: str, run: ClaimRun | ValueError) -> dict:
    if isinstance(run, ValueError):
        return dict(status="unsupported", rel_err=None, detail=_first_line(run))
    return check_claim(cid, device, run)


def _check_family(ids: list[str], device: str, runs: dict) -> list[tuple[str, dict]]:
    return [(cid, _check_one(cid, device, runs[cid])) for cid in ids]


DIED = "the process died in the kernel call, with no Python error (e.g. a C++ check that aborts)"


def _in_process(ids: list[str], device: str, runs: dict) -> list[tuple[str, dict]]:
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(_check_family, ids, device, {cid: runs[cid] for cid in ids}).result()


def _isolated(ids: list[str], device: str, runs: dict) -> list[tuple[str, dict]]:
    """A family in a fresh process; if that process dies, each claim again alone, so a kernel that
    aborts costs only its own claims (refuted: a claimed capability that kills the process)."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return _in_process(ids, device, runs)
    except BrokenProcessPool:
        out = []
        for cid in ids:
            try:
                out += _in_process([cid], device, runs)
            except BrokenProcessPool:
                out.append((cid, dict(status="refuted", rel_err=None, detail=DIED)))
        return out


def families(ids: list[str]) -> list[list[str]]:
    """Claims grouped by (backend, version, build, dtype, head): one kernel variant family each, in input order."""
    groups: dict[tuple, list[str]] = {}
    for cid in ids:
        try:
            c = parse_claim(cid)
            key = (c.backend, c.version, c.build, c.dtype, c.head)
        except ValueError:
            key = ("?", cid)
        groups.setdefault(key, []).append(cid)
    return list(groups.values())


def _git_commit() -> str:
    """kselect's own commit (kselect/provenance.py): never that of a repository enclosing a copy."""
    from kselect.provenance import project_commit

    own = project_commit()
    return (own["commit"] or "unknown")[:12] + ("+dirty" if own["dirty"] else "")
