"""The commands of docs/*.md still run, and the output they show is the output they print (#51, docs that run).

As for the README (test_readme_commands.py): DOCS lists every command line of every page's code blocks with how it
is checked, and a page that shows a command not on the list, or drops one, fails here. The quick ones that run on
CPU are run from an empty folder (a plain `kselect` command in this process, a shell line through bash); a slow,
GPU-only, networked or installing one is a Skip that says why, and where else it is covered.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_readme_commands import Run, Skip

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "selector"))
from kselect_inprocess import kselect_main  # noqa: E402

from kselect.selector.base.cli_errors import call_main  # noqa: E402

TABLE = (r"(?m)^sliding_window\s", r"(?m)^full_attention\s", r"why: ")
MATRIX_BLOCKS = r"(?m)^\S+-pr53175: cache block \d+\n(  \S+ +\S+ +kernel \d+ .*\n)+"
REVIEW_DIFF = "kselect diff matrix=seed b.overlay=[pr48666] format=markdown"
GPU = "needs CUDA and the kernels (docs/gpu-tests.md); the GPU tests run it on an H100/H200"
WHOLE_MATRIX = "a diff of the whole matrix, twice over (minutes on 2 cores); tests/selector/test_diff*.py cover diff on small matrices"
RUNS_MODEL = ("runs the bundled model (tens of seconds each on CPU); README's `kselect run` is run by test_readme_commands.py "
              "and tests/gemma4 cover this option")
SUITE = "the test suite itself: what CI runs"
INSTALLS = "installs packages: .ci/run does the install"

DOCS: dict[str, dict[str, Run | Skip]] = {
    "conformance.md": {
        "kselect claims platform=sm90 > claims.txt": Run("kselect claims platform=sm90 > claims.txt && head -c 300 claims.txt",
                                                         shows=(r"(?m)^[A-Z_]+(_v\d)?:bf16:d\d+:\w+$",)),
        "kselect conformance --claims claims.txt --gpu-name nvidia_h200 --out conf/conformance/nvidia_h200.yaml --jobs 8": Skip(GPU),
        "kselect perf --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,"
        "TRITON_ATTN --rules vllm_0_33_0,post_pr52987 --max-page 128 --warm-jobs 12 --decode 1x512,16x512,1x544,16x544,1x1024,"
        "1x8192,16x1024,16x8192,64x1024,64x8192 --prefill 1x512,1x4096": Skip(GPU),
        "kselect perf --gpu-name nvidia_h200 --models gemma4_31b --kernels FLASH_ATTN_v3,FLASH_ATTN_v4,FLASHINFER,TRITON_ATTN "
        "--rules vllm_0_33_0,post_pr52987 --max-page 128 --decode 1x544,16x544 --context-spread 0.0625 --prefill \"\" "
        "--fence layer:1024": Skip(GPU),
        "kselect perf-steps --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b --prefill 512,4096": Skip(GPU),
        "kselect perf --gpu-name nvidia_h200 --models gemma4_31b,gemma4_e4b --platform sm90 --missing --dry-run": Skip(
            "plans every bucket of two models (over a minute on 2 cores); tests/kselect/test_perf*.py cover --missing"),
    },
    "development.md": {
        "python -m venv .venv && . .venv/bin/activate": Skip("run by test_readme_commands.py (the README's first line)"),
        'pip install torch==2.13.0 -e ".[test,sweep]"': Skip(INSTALLS),
        "python -m pytest -n auto": Skip(SUITE),
        "python -m pytest -q tests/selector/test_golden.py": Skip(SUITE),
        "python -m pytest -m gpu tests/kernels tests/gemma4": Skip(SUITE),
        'pip install -e ".[docs]"': Skip(INSTALLS),
        "python -m mkdocs build -d /tmp/kselect-site": Skip("tests/docs/test_docs_build.py runs the same build"),
        "python -m pytest -q tests/docs": Skip(SUITE),
    },
    "gemma4.md": {
        "kselect run": Skip("run by test_readme_commands.py"),
        "kselect run kv_cache=fp8 kv_cache.scales=calibrated": Skip(RUNS_MODEL),
        "kselect run spec_decode=mtp": Skip(RUNS_MODEL),
        "kselect run model.multimodal=true": Skip(RUNS_MODEL),
        "kselect run --prefill-chunk 8": Skip(RUNS_MODEL),
        "kselect run model=gemma4_e4b model.checkpoint=/path/to/hf_folder": Skip("a placeholder: your own checkpoint"),
        "kselect run platform=auto model=gemma4_31b": Skip(GPU),
    },
    "gpu-tests.md": {
        'pip install -e ".[gpu,test]"': Skip(INSTALLS),
        "pip install flashinfer-python==0.7.2.post1": Skip(INSTALLS),
        "kselect/measurement/builds/install_vllm_fa.sh --release 0.34.0 ~/kselect-fa": Skip("downloads vLLM's wheel; tests/packaging covers it"),
        "export PYTHONPATH=~/kselect-fa:$PYTHONPATH": Skip(GPU),
        "export FLASHINFER_CUDA_ARCH_LIST=9.0a": Skip(GPU),
        "export FLASHINFER_WORKSPACE_BASE=$HOME MAX_JOBS=16": Skip(GPU),
        "python -m pytest -m gpu tests/kernels tests/gemma4 -v": Skip(GPU),
    },
    "matrix.md": {
        "kselect matrix matrix=golden overlay=[pr53175]": Run("kselect matrix matrix=golden overlay=[pr53175]",
                                                             shows=(MATRIX_BLOCKS,)),
        "kselect plot matrix=seed b.overlay=[pr48666] out=plots/pr48666": Skip(
            "the diff of the whole matrix, drawn; tests/selector/test_plot.py draws the same blocks on small matrices"),
    },
    "models.md": {
        "kselect select platform=sm90 model=deepseek_v3 kv_cache=fp8": Skip("run by test_readme_commands.py"),
        "kselect select platform=sm90 model=nemotron_h_8b": Skip("run by test_readme_commands.py"),
        "kselect select platform=sm90 model=hf model.hf_config=/models/my-model": Skip(
            "a placeholder: your own config.json; tests/selector/test_export_paste.py and test_cli_conventions.py run it on one"),
        "kselect select platform=sm90 model=hf model.hf_config=Qwen/Qwen2.5-7B-Instruct": Skip(
            "needs that model in the local Hugging Face cache; tests/selector cover hub ids on a written cache"),
        "kselect select platform=sm90 model=llama3_1_8b_fp8_modelopt": Run(
            "kselect select platform=sm90 model=llama3_1_8b_fp8_modelopt", shows=(r"(?m)^full_attention\s",)),
        "kselect select platform=sm80 model=llama3_1_8b_fp8_kv_ct output=json": Run(
            "kselect select platform=sm80 model=llama3_1_8b_fp8_kv_ct output=json", shows=(r'"schema_version": 1',)),
        "kselect oracle 0.34.0 --grid models --out bench/results/vllm/oracle_models_0_34_0.jsonl.gz": Skip(
            "downloads and runs vLLM 0.34.0 over 560 cells; tests/vllm check its committed record"),
        "kselect oracle 0.34.0 --grid registry --out bench/results/vllm/oracle_registry_0_34_0.jsonl.gz --jobs 1": Skip(
            "downloads and runs vLLM 0.34.0 over the registry grid; tests/vllm check its committed fixture"),
        "kselect oracle 0.34.0 --grid wrappers --out bench/results/vllm/oracle_wrappers_0_34_0.jsonl.gz --jobs 1": Skip(
            "downloads and runs vLLM 0.34.0 over the wrappers grid; tests/vllm/test_oracle_wrappers_fixture.py checks its "
            "committed fixture"),
        "kselect diff matrix=models a.conf=git:main format=markdown": Skip(WHOLE_MATRIX),
    },
    "objective.md": {
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 objective=latency": Skip("run by test_readme_commands.py"),
        "kselect explain platform=sm90 model=gemma4_31b objective=throughput": Run(
            "kselect explain platform=sm90 model=gemma4_31b objective=throughput", shows=(r"sliding_window", r"FLASH_ATTN")),
        "kselect diff a.conf=git:HEAD~1 a.objective=latency": Skip(WHOLE_MATRIX + "; and it depends on the last commit"),
        "kselect diff a.conf=git:HEAD~1 a.objective=latency matrix=h200_objective": Skip(WHOLE_MATRIX),
        "kselect diff b.objective=latency": Skip(WHOLE_MATRIX),
    },
    "performance.md": {
        "python -m kselect.measurement.plot_results --results bench/results/h200 --out plots/h200": Skip(
            "draws 41 PNGs (about half a minute); tests/gemma4/test_e2e_bench.py runs it on synthetic results and checks "
            "that it refuses a folder holding files"),
    },
    "reviewing.md": {
        REVIEW_DIFF: Run(REVIEW_DIFF, shows=(r"\*\*kselect diff \[\] -> \[pr48666\] over matrix seed",)),
        "kselect diff matrix=seed a.overlay=[pr48666] b.overlay=[pr48666,pr52987]": Skip(WHOLE_MATRIX),
        "kselect diff a.conf=git:HEAD check=true": Skip(WHOLE_MATRIX),
        "kselect diff a.conf=git:HEAD~1 check=true": Skip(WHOLE_MATRIX),
        "kselect diff a.conf=git:bb8f2a6 a.rules=base b.rules=vllm_0_33_0": Skip(WHOLE_MATRIX),
        "kselect plot matrix=seed b.overlay=[pr48666] out=plots/pr48666": Skip("shown in matrix.md too; skipped there"),
        "kselect matrix matrix=golden overlay=[pr53175]": Skip("shown in matrix.md too; run there"),
        "python -m pytest tests/selector/test_golden.py --snapshot-update": Skip("rewrites the golden files: a reviewer's step"),
    },
    "selecting.md": {
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8": Skip("run by test_readme_commands.py"),
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json": Run(
            "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json", shows=(r'"schema_version": 1',)),
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=vllm": Run(
            "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=vllm",
            shows=(r"(?m)^vllm serve '<model>' --dtype bfloat16 --kv-cache-dtype fp8",)),
        "kselect select platform=sm90 platform.packages.fa4=false model=gemma4_e4b": Run(
            "kselect select platform=sm90 platform.packages.fa4=false model=gemma4_e4b", shows=TABLE),
        "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 model.multimodal=true rules=post_pr52987 "
        "overlay=[pr48666] verbose=true": Run(
            "kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 model.multimodal=true rules=post_pr52987 "
            "overlay=[pr48666] verbose=true", shows=(*TABLE, r"trace: ")),
        "kselect select platform=sm90 model=gemma4_31b attention.backend=TRITON_ATTN": Run(
            "kselect select platform=sm90 model=gemma4_31b attention.backend=TRITON_ATTN",
            shows=(r"(?m)^sliding_window\s.*TRITON_ATTN", r"(?m)^full_attention\s.*TRITON_ATTN")),
        "kselect select platform=sm90 model=gemma4_31b +attention.backend_per_kind.full_attention=TRITON_ATTN": Run(
            "kselect select platform=sm90 model=gemma4_31b +attention.backend_per_kind.full_attention=TRITON_ATTN",
            shows=(r"(?m)^full_attention\s.*TRITON_ATTN",)),
        "printf '%s\\n' '{\"platform\": \"sm90\", \"model\": \"llama3_1_8b\"}' "
        "'{\"platform\": \"sm100\", \"model\": \"gpt_oss_20b\"}' | kselect select cells=-": Run(
            "printf '%s\\n' '{\"platform\": \"sm90\", \"model\": \"llama3_1_8b\"}' "
            "'{\"platform\": \"sm100\", \"model\": \"gpt_oss_20b\"}' | kselect select cells=-",
            shows=(r'(?m)^\{"overrides":\["platform=sm90","model=llama3_1_8b"\],"exit":0,"selection":\{"schema_version":1',)),
        "kselect select platform=h100 model=llama3_1_8b": Run(
            "kselect select platform=h100 model=llama3_1_8b", shows=(r"platform h100 \(cuda, cc 9\.0",)),
        'eval "$(kselect -sc install=bash)"': Run('eval "$(kselect -sc install=bash)" && complete -p kselect',
                                                  shows=(r"-F _kselect_completion kselect",)),
        "kselect select platform=sm90 kv_cache=fp8 rules.fa-kv_dtype_version_gate.enabled=false": Run(
            "kselect select platform=sm90 kv_cache=fp8 rules.fa-kv_dtype_version_gate.enabled=false", shows=TABLE),
    },
    "vllm.md": {
        "kselect oracle 0.34.0 --rules vllm_0_34_0": Skip("downloads and runs vLLM 0.34.0 over the grid; tests/vllm check its record"),
        "kselect oracle 0.34.0 --dry-run": Skip("asks the package registry for the release"),
        "kselect oracle 0.34.0 --grid wrappers --jobs 1": Skip(
            "downloads and runs vLLM 0.34.0 over the wrappers grid; tests/vllm/test_oracle_wrappers_fixture.py checks its "
            "committed fixture"),
        "kselect oracle 0.34.0 --cc 9.0 --model gemma4_31b --out r.jsonl.gz --ray-address local": Skip(
            "starts Ray and runs vLLM 0.34.0; tests/vllm/test_oracle_cli.py runs --ray-address local on a fake release, "
            "bench/results/vllm/ray_identity/ records it on vLLM's chain"),
        "bash kselect/measurement/vllm/setup.sh 0.34.0": Skip(INSTALLS),
        "~/.cache/kselect/vllm/roundtrip-0.34.0-*/bin/python -m kselect.measurement.vllm.export_roundtrip --src ~/.cache/kselect/vllm/src-0.34.0 "
        "--rules vllm_0_34_0 --grid registry --configs bench/results/vllm/oracle_registry_0_34_0.configs.json "
        "--out bench/results/vllm/export_registry_vllm_0_34_0": Skip(
            "runs in vLLM's venv (kselect/measurement/vllm/setup.sh) for tens of minutes; its report is committed, "
            "tests/vllm/test_export_roundtrip_fixture.py holds kselect to a slice of it"),
        "kselect diff a.rules=vllm_0_33_0 b.rules=vllm_0_34_0 format=markdown": Skip(WHOLE_MATRIX),
        "kselect plot a.rules=vllm_0_33_0 b.rules=vllm_0_34_0": Skip(WHOLE_MATRIX),
    },
}


def page_commands(page: Path) -> list[str]:
    """Every command of a page's shell blocks: trailing `# comments` dropped, `\\` continuations joined."""
    out, fence, pending = [], None, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            assert fence is None or not line[3:].strip(), f"{page.name}: text after a closing fence: {line!r}"
            fence = line[3:].strip() if fence is None else None
            continue
        if fence not in ("bash", "sh", "console", "shell") or not line.strip() or line.strip().startswith("#"):
            continue
        text = re.sub(r"\s+#\s.*$", "", line).strip()
        if text.endswith("\\"):
            pending += text[:-1].strip() + " "
            continue
        out.append(pending + text)
        pending = ""
    return out


PAGES = sorted(p.name for p in (ROOT / "docs").glob("*.md") if page_commands(p))


@pytest.mark.parametrize("page", PAGES)
def test_the_list_is_the_pages(page):
    shown = page_commands(ROOT / "docs" / page)
    listed = list(DOCS.get(page, {}))
    assert shown == listed, (f"{page} shows commands not on the list: {[c for c in shown if c not in listed]}; the list "
                             f"holds commands it no longer shows: {[c for c in listed if c not in shown]}")


RUNS = [(page, shown) for page, cmds in DOCS.items() for shown, how in cmds.items() if isinstance(how, Run)]


def run(how: Run, folder: Path, capsys) -> tuple[int, str]:
    """A plain `kselect <command> args` in this process (no interpreter start-up per command), else bash."""
    words = shlex.split(how.cmd)
    if words[0] == "kselect" and not re.search(r"[|&;<>$`]", how.cmd):
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            code = call_main(kselect_main(words[1]), words[2:])
        finally:
            os.chdir(cwd)
        out = capsys.readouterr()
        return code, out.out + out.err
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "KSELECT_DEBUG")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run(["bash", "-c", how.cmd], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("page, shown", RUNS, ids=[f"{p}:{c[:60]}" for p, c in RUNS])
def test_docs_command_runs_on_cpu(page, shown, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    how = DOCS[page][shown]
    code, out = run(how, tmp_path, capsys)
    assert code == how.rc, f"{how.cmd}: exit {code}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    for pattern in how.shows:
        assert re.search(pattern, out), f"{how.cmd}: output lacks {pattern!r}\n{out[-3000:]}"
    if shown == REVIEW_DIFF:
        check_excerpt(ROOT / "docs" / page, out)
    if "output=json" in shown:
        json.loads(out)


def check_excerpt(page: Path, out: str) -> None:
    """reviewing.md quotes the diff's first line and some of its rows (trimmed): the first line as printed, each row's
    cell count and `where` as a row of the output. A change of the numbers means: paste the command's first line."""
    quoted = [ln[2:] for ln in page.read_text().splitlines() if ln.startswith("> ")]
    assert quoted[0] == out.splitlines()[0], f"{page.name}'s excerpt is stale; the command prints:\n{out.splitlines()[0]}"
    rows = [re.match(r"(\| \d+ \| `[^`]+` \|)", q) for q in quoted]
    assert [r for r in rows if r], "the excerpt quotes no rows"
    for r in filter(None, rows):
        assert re.search(r"(?m)^" + re.escape(r[1]), out), f"{page.name} quotes a row the diff no longer prints: {r[1]}"
