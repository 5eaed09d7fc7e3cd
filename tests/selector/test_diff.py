"""`kselect diff`: the review diff of two overlay sets / two revisions of conf/."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kselect.selector.api import CONF_DIR
from kselect.selector.review.diff import collapse, diff_results, render, render_rect
from kselect.selector.review.diff_render import detail
from kselect.commands.diff import main as diff_main
from kselect.selector.base.errors import KSelectError
from kselect.selector.review.matrix import load_matrix, resolve_named

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kselect.commands.diff", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _diff(a, b, matrix="seed"):
    spec = load_matrix(matrix)
    return diff_results(spec, list(resolve_named(matrix, a)), list(resolve_named(matrix, b)), f"{list(a)}", f"{list(b)}")


def test_pr48666_moves_multimodal_fp8_sm90_from_triton_to_fa4():
    d = _diff((), ("pr48666",))
    block = next(b for b in d.blocks if b.title == "all groups: TRITON_ATTN -> FLASH_ATTN v4")
    assert block.kind == "selection"
    [line] = block.key
    assert (line.groups, [(c.field, c.a, c.b) for c in line.changes]) == (("*",), [("backend", "TRITON_ATTN", "FLASH_ATTN v4")])
    # (with MTP those cells are invalid before #48666: the text-only drafter takes FlashInfer, whose SM90 builder
    # refuses sliding-window layers, vLLM #48848; #48666 makes them valid)
    assert block.patterns == ["sm90 × kv=fp8|fp8_e4m3 × spec=none × multimodal=true × pin=auto"]
    details = {detail(c): w for c, w in block.details}
    assert "all groups: quant_query true -> false, descale q_k_v -> kv_dequant" in details
    assert details["cache block 16 -> 64"] == ""
    valid = next(b for b in d.blocks if b.kind == "became_valid" and "sm90 × kv=fp8|fp8_e4m3 × spec=mtp × multimodal=true × pin=auto" in b.patterns)
    assert valid.title.startswith("was: vLLM fails after selecting FLASHINFER for the draft:sliding_window group")
    rules = {(r.event, r.rule, r.backend) for r in block.rules}
    assert ("fired", "pr48666-sm90_fa4_fp8_kernel_block_64", None) in rules
    assert ("no_longer_rejected", "fa-fp8_kv_combination", "FLASH_ATTN") in rules
    assert ("no_longer_rejected", "cap.FLASHINFER.mm_prefix", "FLASHINFER") in rules
    text = render(d, "table")
    assert "TRITON_ATTN -> FLASH_ATTN v4" in text and "where: sm90 × kv=fp8|fp8_e4m3 × spec=none × multimodal=true × pin=auto" in text


def test_invalid_and_warnings_come_first():
    d = _diff((), ("pr48666",))
    kinds = [b.kind for b in d.blocks]
    # first: cells that became invalid, or (fa3-pinned cells where no group runs FlashAttention
    # are invalid on both sides) whose error changed
    assert kinds[0] in ("became_invalid", "error_changed")
    assert kinds.index("new_warning") < kinds.index("selection")
    assert kinds == sorted(kinds, key=["became_invalid", "error_changed", "new_warning", "became_valid",
                                       "selection", "warning_gone"].index)  # fmt: skip


def test_revert_is_the_exact_inverse_cell_by_cell():
    fwd = _diff((), ("pr48666",))
    back = _diff(("pr48666",), ("pr48666", "pr52987"))
    assert fwd.summary()["changed"] == back.summary()["changed"] > 0
    for f, r in zip(fwd.cells, back.cells):
        assert f.cell == r.cell
        assert f.changed == r.changed
        assert (f.warnings_added, f.warnings_removed) == (r.warnings_removed, r.warnings_added), f.cell.id
        if f.outcome == "became_invalid":
            assert r.outcome == "became_valid"
        assert set(_invert(f.backend + f.lines)) == set(r.backend + r.lines), f.cell.id


def test_a_cell_that_became_valid_says_what_it_now_runs():
    """A became_valid block renders the cell's old error and the kernels it now runs, by their one label."""
    from dataclasses import replace

    from kselect.selector.base import texts
    from kselect.selector.review.diff_render import render as render_diff

    spec = load_matrix("default")
    rs = list(resolve_named("default", ()))
    bad = next(r for r in rs if r.selection is None)
    first = next(i for i, r in enumerate(rs) if r.selection is not None)
    ra = [replace(r, selection=None, failure=bad.failure) if i == first else r for i, r in enumerate(rs)]
    d = diff_results(spec, ra, rs, "a", "b")
    assert [b.kind for b in d.blocks if b.kind == "became_valid"] == ["became_valid"]
    now = "; ".join(f"{texts.group_label(g.id)}: {g.label}" for g in rs[first].selection.groups)
    assert f"; now: {now}" in render_diff(d, "table")


def _invert(lines):
    """The change lines of the way back: every field change swapped, added groups removed."""
    swap = {"group_added": "group_removed", "group_removed": "group_added", None: None}
    return [line.model_copy(update={"changes": tuple(c.model_copy(update={"a": c.b, "b": c.a}) for c in line.changes),
                                    "event": swap[line.event]}) for line in lines]  # fmt: skip


def test_no_change_is_empty_and_check_passes():
    d = _diff(("pr48666", "pr52987"), (), "seed_smoke")
    assert d.changed == [] and d.blocks == []
    assert "no cell changed" in render(d, "table")


def test_collapse_uses_skipped_cells_as_dont_cares():
    values = [["a", "b"], ["auto", "fp8"], ["unit", "calibrated"]]
    universe = {(p, k, s) for p in "ab" for k in ("auto", "fp8") for s in ("unit", "calibrated")} - {("a", "auto", "calibrated"), ("b", "auto", "calibrated")}
    keys = {k for k in universe if k[0] == "a"}
    rects = collapse(keys, universe, values)
    assert [render_rect(r, ["platform", "kv_cache", "scales"], values) for r in rects] == ["a"]
    keys = {("a", "fp8", "unit"), ("b", "fp8", "unit"), ("a", "fp8", "calibrated")}
    rects = collapse(keys, universe, values)
    out = [render_rect(r, ["platform", "kv_cache", "scales"], values) for r in rects]
    assert sorted(out) == ["a × kv=fp8", "kv=fp8 × scales=unit"]  # products may overlap
    covered = {c for r in rects for c in itertools.product(*r)} & universe
    assert covered == keys


def cli(capsys, *args: str) -> tuple[int, str]:
    """selector.diff's main in-process (the exit-code plumbing is checked once by subprocess)."""
    code = diff_main(list(args))
    return code, capsys.readouterr().out


def test_cli_markdown_json_and_check(capsys):
    code, out = cli(capsys, "b.overlay=[pr48666]", "matrix=seed_smoke", "format=markdown", "check=true")
    assert code == 1
    assert out.startswith("**kselect diff [] -> [pr48666] over matrix seed_smoke")
    assert "**all groups: TRITON_ATTN -> FLASH_ATTN v4**" in out
    assert "`sm90 × gemma4_31b × kv=fp8 × spec=none × multimodal=true`" in out
    code, out = cli(capsys, "a.overlay=[pr48666]", "b.overlay=[pr48666,pr52987]", "matrix=seed_smoke", "format=json")
    d = json.loads(out)
    assert code == 0 and d["summary"]["changed"] > 0 and d["blocks"][0]["cells"]
    code, out = cli(capsys, "b.overlay=[pr48666,pr52987]", "matrix=seed_smoke", "check=true")
    assert code == 0 and "no cell changed" in out
    bad = run("frob=1")  # the CLI's exit status for a bad argument
    assert bad.returncode == 2 and "frob" in bad.stderr and "Traceback" not in bad.stderr


@pytest.fixture
def conf_repo(tmp_path):
    """A git repository holding a copy of conf/, one commit."""
    repo = tmp_path / "repo"
    shutil.copytree(CONF_DIR, repo / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "conf")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "conf")
    return repo


def test_git_revision_against_worktree(conf_repo, capsys):
    """Editing conf/ in the worktree: the diff against git:HEAD shows exactly its effect."""
    repo = f"repo={conf_repo}"
    rules = conf_repo / "conf" / "rules" / "post_pr52987.yaml"
    rules.write_text(rules.read_text() + "# a comment changes nothing\n")
    code, out = cli(capsys, "a.conf=git:HEAD", "matrix=seed_smoke", repo, "check=true")
    assert code == 0 and "no cell changed" in out, out
    caps = conf_repo / "conf" / "capabilities" / "default.yaml"
    text = caps.read_text()
    triton = "TRITON_ATTN:\n"
    start = text.index(triton)
    triton_blocks = "  kernel_block_sizes: [{multiple_of: 16}]"  # TRITON_ATTN's (the first after its heading)
    at = text.index(triton_blocks, start)
    caps.write_text(text[:at] + "  kernel_block_sizes: [{multiple_of: 32}]" + text[at + len(triton_blocks):])
    code, out = cli(capsys, "a.conf=git:HEAD", "matrix=seed_smoke", repo, "format=json", "check=true")
    assert code == 1
    d = json.loads(out)
    [block] = [b for b in d["blocks"] if b["kind"] == "selection"]
    assert block["patterns"] == ["sm90 × gemma4_tiny", "sm90 × kv=fp8 × spec=none × multimodal=true"]
    assert {"change": "full_attention: kernel block 32 -> 64, kv block 32 -> 64", "where": "gemma4_31b"} in block["details"]
    # git:<rev>:[overlays] and worktree:[overlays]
    # (under pr48666 the 31B's FP8 cells run FA4, so TRITON_ATTN's block sizes matter to gemma4_tiny's only)
    code, out = cli(capsys, "a.conf=git:HEAD", "a.overlay=[pr48666]", repo, "matrix=seed_smoke", "check=true")
    assert code == 1 and [ln.strip() for ln in out.splitlines() if ln.strip().startswith("where:")] == [
        "where: sm90 × gemma4_tiny"], out
    code, out = cli(capsys, "a.conf=git:HEAD", "b.overlay=[pr48666]", repo, "matrix=seed_smoke")
    assert code == 0 and "all groups: TRITON_ATTN -> FLASH_ATTN v4" in out
    with pytest.raises(KSelectError, match="nope: not a commit"):
        diff_main(["a.conf=git:nope", repo])


OLD_CONF_REV = "bb8f2a6396c979c36fbcbc3d85c809b55265c168"  # conf/ before the rules options: rules/base.yaml only


@pytest.fixture
def old_conf_repo(tmp_path):
    """A throwaway repository: conf/ from before `rules=post_pr52987` / `vllm_0_33_0` existed
    (this checkout's history), then today's conf/ in the worktree."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_CONF_REV}^{{commit}}"], capture_output=True).returncode:
        pytest.skip("the pre-rules-options commit is not in this clone (shallow)")
    repo = tmp_path / "old"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", OLD_CONF_REV, "--", "conf"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=tar, check=True)
    git("add", "conf")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old conf")
    shutil.rmtree(repo / "conf")
    shutil.copytree(CONF_DIR, repo / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    # each side reads its own measured data: keep the old revision's, so only the rules options differ
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "HEAD", "--", "conf/conformance"], check=True)
    for extra in sorted(set(p.name for p in (repo / "conf" / "conformance").iterdir())
                        - set(subprocess.run(["git", "-C", str(repo), "ls-files", "conf/conformance"], capture_output=True,
                                             text=True, check=True).stdout.replace("conf/conformance/", "").split())):
        (repo / "conf" / "conformance" / extra).unlink()
    return repo


def test_git_revision_from_before_the_rules_options(old_conf_repo, capsys):
    """The matrix declares rules=post_pr52987, which the old revision lacks (it had `base`, the same
    rules): that side composes its own default and says so; the seed's rules moved only where vLLM 0.28.0's own code
    showed them wrong (bench/results/vllm/README.md): FlashInfer's SM90 builder refuses a sliding-window group."""
    repo = f"repo={old_conf_repo}"
    code = diff_main(["a.conf=git:HEAD", "matrix=seed_smoke", repo, "check=true"])
    out, err = capsys.readouterr()
    assert code == 1 and "6 changed (6 selection, 6 became invalid, 0 with new warnings)" in out, out
    assert out.count("[flashinfer-sm90_sliding_window_builder]  (") == 2, out
    assert "rules=base -> worktree:[] rules=post_pr52987" in out
    assert "has no rules option 'post_pr52987'" in err and "a.rules=" in err
    # a rules option named for both sides must exist on both: exit 2 naming the key as written and the per-side one
    with pytest.raises(KSelectError, match=r"diff: rules=vllm_0_33_0: the a side .* has no rules option .* e.g. a.rules=base"):
        diff_main(["a.conf=git:HEAD", "matrix=seed_smoke", repo, "rules=vllm_0_33_0"])
    # per side: the old seed rules against vLLM 0.33.0's, example commands under b's rules
    code = diff_main(["a.conf=git:HEAD", "a.rules=base", "b.rules=vllm_0_33_0", "matrix=seed_smoke", repo, "format=json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["summary"]["changed"] > 0
    assert all("rules=vllm_0_33_0" in b["example"] for b in d["blocks"] if b["example"])


def test_a_prefill_backend_move_renders_what_prefill_ran_before():
    """`same` (prefill on the decode backend) is data; the text names it, never prints the token."""
    from kselect.selector.review.diff_records import PREFILL_AS_DECODE, Change, ChangeLine
    from kselect.selector.review.diff_render import change_line

    line = ChangeLine(groups=("sliding_window",),
                      changes=(Change(field="prefill_backend", a=PREFILL_AS_DECODE, b="FLASH_ATTN v3+upstream"),))
    assert change_line(line) == "sliding_window: prefill backend (its decode backend) -> FLASH_ATTN v3+upstream"


def test_h200_objective_matrix_runs_every_cell_with_and_without_the_upstream_build():
    """conf/matrix/h200_objective.yaml, the review matrix of measured selection on the H200: every cell resolves under
    objective=latency, and flash-attention's FA3 build runs only in the cells that pin it installed (fa3up)."""
    from kselect.selector.review.cells import expand
    from kselect.selector.review.configs import Builder
    from kselect.selector.review.matrix import load_matrix, resolve_cells

    results = resolve_cells(expand(load_matrix("h200_objective", CONF_DIR)), builder=Builder(CONF_DIR, ["objective=latency"]))
    assert len(results) == 64 and all(r.outcome == "ok" for r in results)
    runs = {(r.cell.pin, lab) for r in results for g in r.selection.groups
            for lab in (g.label, g.prefill.label if g.prefill else g.label)}
    assert ("fa3up", "FLASH_ATTN v3+upstream") in runs
    assert not any(pin == "auto" and "+upstream" in lab for pin, lab in runs)
