"""Every command bench/results/COMMANDS.yaml records runs on today's code: GPU-only ones as far as a CPU machine can take
them (the experiment composed and each program's own parser given its command line), CPU ones for real. And every
record kept in bench/results/ is listed there, so a new record cannot come without its command."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kselect.commands import bench
from parse_only import check_argv
from kselect.cli import COMMANDS as KSELECT_COMMANDS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
RECORDS = yaml.safe_load((RESULTS / "COMMANDS.yaml").read_text())["records"]
ENTRIES = [(rec["path"], cmd) for rec in RECORDS for cmd in rec["commands"]]


def _argv(cmd: str, out: Path) -> list[str]:
    argv = shlex.split(cmd.replace("$OUT", str(out)), comments=True)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):  # VAR=value before the program
        argv.pop(0)
    return argv


def _run_cpu(argv: list[str]) -> subprocess.CompletedProcess:
    if argv[0] == "kselect":
        argv = [sys.executable, "-m", "kselect", *argv[1:]]
    elif argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def _check(cmd, out: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    if isinstance(cmd, dict) and "heredoc" in cmd:
        text = (ROOT / cmd["heredoc"]).read_text()
        body = text.split("python3 - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
        r = subprocess.run([sys.executable, "-"], input=body, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip(), "the heredoc printed nothing"
        return
    if isinstance(cmd, dict) and "compose" in cmd:  # the Hydra app composes its config with these overrides
        r = _run_cpu([*_argv(cmd["compose"], out), "--cfg", "job"])
        assert r.returncode == 0 and "platform:" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        return
    if isinstance(cmd, dict):
        r = _run_cpu(_argv(cmd["cpu"], out))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return
    argv = _argv(cmd, out)
    prog, args = argv[0], argv[1:]
    if prog == "kselect" and args[0] == "bench":
        assert bench.main([*args[1:], "dry_run=true"]) == 0
    elif prog == "kselect":
        check_argv(ROOT, f"kselect.commands.{KSELECT_COMMANDS[args[0]][0]}", args[1:], cmd)
    elif prog == "bash":
        script = ROOT / args[0]
        assert script.is_file(), f"{args[0]} does not exist"
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    elif prog in ("python", "python3") and args[:2] == ["-m", "pytest"]:
        paths = [a.split("::")[0] for a in args[2:] if a.startswith("tests/")]
        assert paths and all((ROOT / p).exists() for p in paths), paths
    elif prog in ("python", "python3") and args[0] == "-m":
        spec = importlib.util.find_spec(args[1])
        assert spec is not None and spec.origin, f"{args[1]}: no such module"
        if "argparse" in Path(spec.origin).read_text() or args[2:]:
            check_argv(ROOT, args[1], args[2:], cmd)
        else:  # a probe without options: it compiles (what it imports is checked by its own GPU run)
            py_compile.compile(spec.origin, cfile=str(out / "probe.pyc"), doraise=True)
    else:  # a script path (`python3 bench/...py`) included: the measurement programs are modules of the package
        pytest.fail(f"{cmd!r}: no check for program {prog!r} {args[:1]}; allowed: kselect, python3 -m <module>, "
                    "python3 -m pytest, bash, cpu:, compose:, heredoc:")


@pytest.mark.parametrize("path,cmd", ENTRIES, ids=[f"{p.removeprefix('bench/results/')}:{i}" for i, (p, _) in enumerate(ENTRIES)])
def test_recorded_command_runs_on_todays_code(path, cmd, tmp_path, monkeypatch):
    assert (ROOT / path).exists(), f"{path} is listed but gone"
    _check(cmd, tmp_path, monkeypatch)


def test_every_kept_record_is_listed():
    """bench/results/ holds only records with a command: each folder (h200/<topic>, and each other top folder)
    appears in COMMANDS.yaml."""
    listed = {rec["path"] for rec in RECORDS}
    folders = {f"bench/results/h200/{p.name}" for p in (RESULTS / "h200").iterdir() if p.is_dir()}
    folders |= {f"bench/results/{p.name}" for p in RESULTS.iterdir() if p.is_dir() and p.name != "h200"}
    assert folders - listed == set()
    assert not [p for p in (RESULTS / "h200").iterdir() if p.is_file()], "h200/ holds folders of records only"


def test_results_readmes_name_no_missing_program():
    """A program a results README names is in the checkout, or it is a window script LOG.md lists as retired (read at
    the commit it names) or a script or module it lists as moved (within) the package, or a module that imports:
    `python3 -m kernels.conformance` cannot come back. A moved Python script is a module today, a moved shell script
    a file of the package."""
    import re

    log = (RESULTS / "LOG.md").read_text()
    retired = set(re.findall(r"^\| `([a-z0-9_]+\.sh)` \|", log, flags=re.M))
    moved = dict(re.findall(r"^\| `(bench/[\w/]+\.(?:py|sh)|kselect\.[\w.]+)` \| `(kselect[\w./]+)` \|", log,
                            flags=re.M))  # fmt: skip
    assert len(retired) >= 19 and moved
    for was, now in moved.items():
        if was.endswith(".sh"):
            assert now.endswith(".sh") and (ROOT / now).is_file(), f"LOG.md: {was} moved to {now}, which is missing"
        else:
            assert importlib.util.find_spec(now), f"LOG.md: {was} moved to {now}, which does not import"
    bad = []
    for md in RESULTS.rglob("*.md"):
        if md.is_relative_to(RESULTS / "vllm"):
            continue
        text = md.read_text()
        for path in re.findall(r"(?:bash|python3?) (bench/[\w/]+\.(?:sh|py))", text):
            if not (ROOT / path).is_file() and Path(path).name not in retired and path not in moved:
                bad.append(f"{md.relative_to(ROOT)}: {path}")
        for mod in re.findall(r"python3? -m ([A-Za-z_][\w.]*)", text):
            mod = moved.get(mod, mod)  # a module LOG.md lists as moved: its name today
            if mod not in ("pytest", "venv") and not (mod.split(".")[0] == "kselect" and importlib.util.find_spec(mod)):
                bad.append(f"{md.relative_to(ROOT)}: -m {mod}")  # the project's modules are kselect.*
    assert bad == []
