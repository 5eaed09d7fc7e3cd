"""A newcomer's pass over the README's commands: clone the branch, build a wheel from the clone,
install it into a fresh venv (`--system-site-packages`: torch and the other dependencies come from
this interpreter), then run every README command that runs on a CPU from an empty directory outside
the repository (the commands that need the checkout, like `bench/...` or `a.conf=git:...`, from the
clone), and record each one's exit status, time, whether a traceback appeared and what it left behind.

    python -m kselect.measurement.review.readme_pass --out bench/results/newcomer/commands.md [--work /tmp/newcomer]
        [--only ID ...] [--with-tests]

Reading the outputs against the README's statements is the reader's job (bench/results/newcomer/README.md);
the logs stay in WORK/logs/ID.{out,err}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kselect.provenance import CHECKOUT as ROOT
from kselect.selector.base.files import atomic_write

H = "platform=sm90 model=gemma4_31b kv_cache=fp8"


@dataclass
class Cmd:
    id: str
    cmd: str
    where: str = "empty"  # "empty": the empty directory outside the repo; "clone": the clone's root
    want: str = "0"  # "0", "1", "2", "0|1": the exit status the README leads a user to expect
    section: str = ""


COMMANDS = [
    Cmd("help", "kselect --help", section="Set-up: the wheel's copy runs"),
    Cmd("which", "command -v kselect && python -c 'import kselect.selector.api as a; print(a.CONF_DIR)'"),
    Cmd("run", "kselect run", section="Quick start"),
    Cmd("sel-table", f"kselect select {H}", section="Selecting kernels"),
    Cmd("sel-json", f"kselect select {H} output=json"),
    Cmd("sel-vllm", f"kselect select {H} output=vllm"),
    Cmd("sel-nofa4", "kselect select platform=sm90 platform.packages.fa4=false model=gemma4_e4b"),
    Cmd("sel-verbose", f"kselect select {H} model.multimodal=true rules=post_pr52987 overlay=[pr48666] verbose=true"),
    Cmd("sel-pin", "kselect select platform=sm90 model=gemma4_31b attention.backend=TRITON_ATTN"),
    Cmd("sel-pin-group", "kselect select platform=sm90 model=gemma4_31b +attention.backend_per_kind.full_attention=TRITON_ATTN"),
    Cmd("hydra-help", "kselect select --help"),
    Cmd("hydra-cfg", "kselect select --cfg job"),
    Cmd("hydra-info", "kselect select --info"),
    Cmd("hydra-m", "kselect select -m platform=sm80,sm90"),
    Cmd("hydra-completion", "kselect select --shell-completion install=bash"),
    Cmd("hydra-rundir", "kselect select platform=sm90 hydra.run.dir=rundir"),
    Cmd("bad-input", "kselect select platform=sm99", want="2"),
    Cmd("rule-off", "kselect select platform=sm90 kv_cache=fp8 rules.fa-kv_dtype_version_gate.enabled=false"),
    Cmd("auto-override", "kselect select platform=auto platform.packages.triton=true"),
    Cmd("diff-md", "kselect diff matrix=seed b.overlay=[pr48666] format=markdown", section="Reviewing a kernel change"),
    Cmd("diff-revert", "kselect diff matrix=seed a.overlay=[pr48666] b.overlay=[pr48666,pr52987]"),
    Cmd("diff-head-empty", "kselect diff a.conf=git:HEAD check=true", want="2"),
    Cmd("diff-head", "kselect diff a.conf=git:HEAD check=true", where="clone"),
    Cmd("diff-head1", "kselect diff a.conf=git:HEAD~1 check=true", where="clone", want="0|1"),
    Cmd("plot", "kselect plot matrix=seed b.overlay=[pr48666] out=plots/pr48666"),
    Cmd("matrix", "kselect matrix matrix=golden overlay=[pr53175]"),
    Cmd("review-script", "kselect/measurement/review/conf_diff.sh main", where="clone", want="0|1"),
    Cmd("golden-update", "python -m pytest -q -p no:cacheprovider tests/selector/test_golden.py --snapshot-update"
        " && git status --porcelain tests/selector/__snapshots__", where="clone"),
    Cmd("plugin", "printf '%s\\n' 'import pytest' '@pytest.mark.kselect_matrix(\"smoke\", overlays=[[], [\"pr48666\"]])'"
        " 'def test_cell(kselect_cell):' '    cell, cfg, selection = kselect_cell' '    assert selection.groups'"
        " > test_mine.py && python -m pytest -q -p no:cacheprovider test_mine.py -k sm90-gemma4_31b-fp8-mtp-pr48666"
        " && rm test_mine.py"),
    Cmd("sweep", "kselect sweep -m platform=sm80,sm90 kv_cache=auto,fp8"),
    Cmd("sweep-joblib", "kselect sweep -m platform=sm80,sm90 kv_cache=auto,fp8 hydra/launcher=joblib"),
    Cmd("gather", "kselect gather $(ls -d multirun/*/* | tail -1)"),
    Cmd("sweep-no-m", "kselect sweep platform=sm90"),
    Cmd("claims", "kselect claims platform=sm90 > claims.txt && wc -l < claims.txt", section="Kernels and backends"),
    Cmd("claims-help", "kselect claims --help"),
    Cmd("conformance-cpu", "kselect conformance --claims claims.txt --gpu-name nvidia_h200 --out nvidia_h200.yaml --jobs 8",
        want="2"),
    Cmd("objective", f"kselect select {H} objective=latency", section="Selection by measurement"),
    Cmd("explain", "kselect explain platform=sm90 model=gemma4_31b objective=throughput"),
    Cmd("diff-objective-head1", "kselect diff a.conf=git:HEAD~1 a.objective=latency", where="clone"),
    Cmd("diff-objective", "kselect diff b.objective=latency"),
    Cmd("perf-help", "kselect perf --help"),
    Cmd("install-vllm-fa", "kselect/measurement/builds/install_vllm_fa.sh $WORK/kselect-fa "
        "~/.cache/kselect/vllm/wheels/vllm-0.33.0-*.whl", where="clone", section="GPU tests"),
    Cmd("gpu-tests-cpu", "python -m pytest -q -p no:cacheprovider -m gpu tests/kernels tests/gemma4", where="clone",
        want="0|5"),
    Cmd("run-fp8", "kselect run kv_cache=fp8 kv_cache.scales=calibrated", section="The bundled Gemma-4"),
    Cmd("run-chunk-module", "python -m kselect.commands.run --prefill-chunk 8 --max-new-tokens 8"),
    Cmd("e2e-smoke", "python -m kselect.measurement.e2e --smoke --out $WORK/e2e", where="clone"),
    Cmd("run-mtp", "kselect run spec_decode=mtp"),
    Cmd("run-mm", "kselect run model.multimodal=true"),
    Cmd("run-chunk", "kselect run --prefill-chunk 8"),
    Cmd("run-ckpt", "kselect run model=gemma4_e4b model.checkpoint=/path/to/hf_folder", want="2"),
    Cmd("run-31b-cpu", "kselect run platform=auto model=gemma4_31b", want="2"),
    Cmd("oracle-slice", "kselect oracle 0.33.0 --out $WORK/oracle.jsonl.gz --cc 9.0 --model gemma4_31b --no-compare",
        where="clone",
        section="Checking against vLLM itself"),
    Cmd("agree-slice", "python -m kselect.measurement.vllm.agree $WORK/oracle.jsonl.gz --rules vllm_0_33_0 "
        "--out $WORK/agree", where="clone"),
    Cmd("plot-results", "python -m kselect.measurement.plot_results --results bench/results/h200 --out $WORK/plots",
        where="clone", section="Performance"),
    Cmd("tests", "python -m pytest -n auto -q -p no:cacheprovider", where="clone", section="Quick start: the tests"),
]


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def setup(work: Path, repo: Path, branch: str, env: dict) -> tuple[Path, Path]:
    """A clean clone of `branch`, a wheel built from it, a fresh venv holding the wheel."""
    clone, dist, venv = work / "clone", work / "dist", work / "venv"
    sh(["git", "clone", "-q", "--branch", branch, str(repo), str(clone)], env=env)
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(clone)],
       env=env)
    [whl] = dist.glob("kselect-*.whl")
    sh([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], env=env)
    sh([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(whl)], env=env)
    return clone, whl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the Markdown table to write")
    ap.add_argument("--work", type=Path, default=Path("/tmp/newcomer"))
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--branch", default=None, help="default: the checkout's current branch")
    ap.add_argument("--only", nargs="+", help="command ids to run (setup always runs)")
    ap.add_argument("--with-tests", action="store_true", help="also run the README's test command (minutes)")
    opts = ap.parse_args(argv)
    branch = opts.branch or sh(["git", "-C", str(opts.repo), "rev-parse", "--abbrev-ref", "HEAD"]).stdout.strip()
    work = opts.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    empty = work / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CI")}
    clone, whl = setup(work, opts.repo.resolve(), branch, env)
    commit = sh(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"]).stdout.strip()
    env.update(PATH=f"{work / 'venv' / 'bin'}:{env['PATH']}", WORK=str(work), VIRTUAL_ENV=str(work / "venv"))
    rows = []
    for c in COMMANDS:
        if (opts.only and c.id not in opts.only) or (c.id == "tests" and not opts.with_tests):
            continue
        cwd = empty if c.where == "empty" else clone
        before = {p.name for p in cwd.iterdir()}
        t = time.perf_counter()
        try:
            p = subprocess.run(["bash", "-c", c.cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        secs = time.perf_counter() - t
        atomic_write(work / "logs" / f"{c.id}.out", out)
        atomic_write(work / "logs" / f"{c.id}.err", err)
        new = sorted({p.name for p in cwd.iterdir()} - before) if c.where == "empty" else []
        tb = "Traceback" in out or "Traceback" in err
        ok = str(rc) in c.want.split("|") and not tb
        last = (err.strip().splitlines() or out.strip().splitlines() or [""])[-1 if rc else 0]
        note = ("**traceback** " if tb else "") + last.replace("|", "\\|")[:160]
        rows.append((c, rc, secs, ok, new, note))
        print(f"{'ok ' if ok else 'BAD'} {c.id:22s} exit {rc} ({secs:.1f} s) {note[:100]}", flush=True)
    lines = [f"Wheel `{whl.name}` built from a clean clone of `{branch}` at {commit}, installed into a fresh "
             f"`python3 -m venv --system-site-packages`; commands run from an empty directory outside the repository "
             f"(`empty`) or the clone's root (`clone`). Command: `python -m kselect.measurement.review.readme_pass "
             f"--out {opts.out}{' --with-tests' if opts.with_tests else ''}`.", "",
             "| section | id | where | command | exit (expected) | s | left behind | first line / last error line |",
             "|---|---|---|---|---|---:|---|---|"]
    section = ""
    for c, rc, secs, ok, new, note in rows:
        section = c.section or section
        cmd = c.cmd.replace("|", "\\|")
        verdict = f"{rc} ({c.want})" + ("" if ok else " **unexpected**")
        lines.append(f"| {section if c.section else ''} | {c.id} | {c.where} | `{cmd}` | {verdict} | {secs:.1f} | "
                     f"{', '.join(new) or '-'} | {note} |")
    atomic_write(opts.out, "\n".join(lines) + "\n")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
