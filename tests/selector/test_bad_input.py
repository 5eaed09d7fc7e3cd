"""Issue #15's security and data-safety cases, and its examples, as regression tests.

Each test failed before the fix it names (git option injection, Hydra callbacks, resolvers,
paths out of conf/, alias bombs, unchecked checkpoint sizes, non-atomic writers, conformance
merges and corrupted files, mixed sweeps)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kselect.selector.evidence import conformance_data as sel_conformance
from kselect.selector.api import CONF_DIR, compose, compose_raw
from kselect.selector.base.cli_errors import call_main
from kselect.selector.base.errors import KSelectError, SelectionError
from kselect.selector.base.files import FileError, atomic_write, load_yaml
from kselect.selector.api import Evidence, resolve

ROOT = Path(__file__).resolve().parents[2]
BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def select_under(conformance_dir: Path, argv: list[str]) -> int:
    """`kselect select argv` with the conformance data of `conformance_dir` (exit status; errors on stderr)."""
    evidence = Evidence(conformance_dir=conformance_dir)
    return call_main(lambda a: resolve(compose(a), evidence) and 0, argv)


def select_main(argv):
    from kselect.commands.select import main

    return call_main(main, argv)


@pytest.fixture
def conf_copy(tmp_path):
    d = tmp_path / "conf"
    shutil.copytree(CONF_DIR, d)
    return d


# ---------------------------------------------------------------- the issue's examples


def test_backend_per_kind_auto_means_that_group_is_not_pinned():
    sel = resolve(compose(["platform=sm90", "model=gemma4_31b", "+attention.backend_per_kind.full_attention=auto"]))
    base = resolve(compose(["platform=sm90", "model=gemma4_31b"]))
    assert [g.backend for g in sel.groups] == [g.backend for g in base.groups]


@pytest.mark.parametrize("override,key", [
    ("model.full_attention_every=6", "model.num_kv_shared_layers"),
    ("model.head_dim=1000000000000", "model.head_dim"),
    ("model.num_hidden_layers=1000000000000", "model.num_hidden_layers"),
    ("platform.compute_capability=[-9,0]", "platform.compute_capability"),
    ("overlay=[pr48666,pr52987,pr48666]", "overlay"),
])  # fmt: skip
def test_issue_examples_exit_2_naming_the_key(override, key, capsys):
    model = ["model=gemma4_tiny"] if "full_attention_every" in override else []
    assert select_main(["platform=sm90", *model, override]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and "internal error" not in err


def test_fa_version_pin_no_group_runs_is_ignored_as_vllm_does_with_a_warning():
    """vLLM ignores flash_attn_version where no layer runs FlashAttention: kselect selects what vLLM
    selects (the same as without the pin) and says so with a typed warning; strict=true refuses it."""
    base = ["platform=sm80", "model=gemma4_31b"]
    plain = resolve(compose(base))
    sel = resolve(compose([*base, "attention.flash_attn_version=3"]))
    assert [(g.backend, g.flash_attn_version, g.kv_block_size) for g in sel.groups] == \
        [(g.backend, g.flash_attn_version, g.kv_block_size) for g in plain.groups]
    [w] = [w for w in sel.warnings if w.code == "setting_ignored"]
    assert w.setting == "attention.flash_attn_version=3" and "sm80" in w.reason
    assert not [w for w in plain.warnings if w.code == "setting_ignored"]
    with pytest.raises(SelectionError, match=r"strict=true refuses .*attention.flash_attn_version=3 is ignored by vLLM"):
        resolve(compose([*base, "attention.flash_attn_version=3", "strict=true"]))
    sel = resolve(compose(["platform=sm90", "model=gemma4_e4b", "attention.flash_attn_version=3", "attention.backend=FLASH_ATTN"]))
    assert all(g.flash_attn_version for g in sel.groups) and not [w for w in sel.warnings if w.code == "setting_ignored"]


def test_strict_ignored_pin_exits_2_with_one_paragraph(capsys):
    assert select_main(["platform=sm80", "model=gemma4_31b", "attention.backend=TRITON_ATTN", "attention.flash_attn_version=4",
                        "strict=true"]) == 2
    err = capsys.readouterr().err
    assert "attention.flash_attn_version=4 is ignored by vLLM" in err and "attention.backend=TRITON_ATTN" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_debug_shows_the_traceback(monkeypatch):
    monkeypatch.delenv("KSELECT_DEBUG", raising=False)
    with pytest.raises(KSelectError):
        select_main(["--debug", "platform=sm90", "model.head_dim=0"])
    assert select_main(["platform=sm90", "model.head_dim=0"]) == 2  # --debug does not stick


# ---------------------------------------------------------------- security


def test_git_ref_is_never_a_git_option(tmp_path, capsys):
    from kselect.commands.diff import main

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for argv in ([f"a.conf=git:--output={victim}", "matrix=smoke"],
                 ["a.conf=git:HEAD", "matrix=smoke", f"conf_path=--output={victim}"],
                 ["a.conf=git:--remote=.", "matrix=smoke"]):  # fmt: skip
        assert call_main(main, argv) == 2
        assert "allowed:" in capsys.readouterr().err
    assert victim.read_text() == "keep"


def test_git_ref_resolved_to_a_sha_first(monkeypatch, tmp_path):
    from kselect.selector.review import diff_sources as diff

    calls = []
    real = subprocess.run
    monkeypatch.setattr(diff.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or real(cmd, **kw))
    diff.git_conf(ROOT, "HEAD", tmp_path)
    assert calls[0][3:6] == ["rev-parse", "--verify", "--quiet"]
    archive = calls[1]
    assert archive[archive.index("archive") + 2] != "HEAD" and len(archive[archive.index("archive") + 2]) >= 40
    assert archive[-2:] == ["--", "conf"]


@pytest.mark.parametrize("where,text", [
    ("overlay/evil.yaml", "# @package _global_\nhydra:\n  callbacks:\n    x: {_target_: builtins.open, file: VICTIM, mode: w}\n"),
    ("config.yaml", None),  # conf/config.yaml with a callback appended
    ("rules/evil.yaml", "x:\n  stage: warning\n  reason: r\n  _target_: os.system\n"),
])  # fmt: skip
def test_no_code_from_conf_files(conf_copy, tmp_path, where, text, monkeypatch, capsys):
    victim = tmp_path / "victim"
    if text is None:
        p = conf_copy / "config.yaml"
        text = p.read_text() + f"hydra:\n  callbacks:\n    x: {{_target_: builtins.open, file: {victim}, mode: w}}\n"
    (conf_copy / where).write_text(text.replace("VICTIM", str(victim)))
    with pytest.raises(KSelectError, match="not allowed"):
        compose_raw(["platform=sm90", "overlay=[evil]"] if "overlay" in where else ["platform=sm90"], conf_copy)
    # kselect sweep refuses the same tree before Hydra runs anything
    from kselect.commands import sweep

    monkeypatch.setattr("kselect.selector.review.sweep.CONF_DIR", conf_copy)
    monkeypatch.chdir(tmp_path)
    assert call_main(sweep.main, ["-m", "platform=cpu"]) == 2
    assert "not allowed" in capsys.readouterr().err
    assert not victim.exists() and not (tmp_path / "multirun").exists()


def test_sweep_refuses_hydra_callbacks_and_rerun_pickles(tmp_path, monkeypatch, capsys):
    from kselect.commands import sweep

    monkeypatch.chdir(tmp_path)
    for argv in (["-m", "platform=cpu", "+hydra.callbacks.x._target_=builtins.print"],
                 ["-m", "--experimental-rerun=config.pickle"], ["-m", "--config-dir=/tmp", "platform=cpu"]):  # fmt: skip
        assert call_main(sweep.main, argv) == 2
        assert "kselect:" in capsys.readouterr().err
    assert not (tmp_path / "multirun").exists()


def test_no_resolvers_in_rule_text(conf_copy, monkeypatch, capsys):
    monkeypatch.setenv("KSELECT_TEST_SECRET", "hunter2")
    (conf_copy / "overlay" / "leak.yaml").write_text(
        "# @package _global_\noverlays:\n  leak: x\nrules:\n  leak.w:\n    stage: warning\n    reason: 'token ${oc.env:KSELECT_TEST_SECRET}'\n"
    )
    with pytest.raises(KSelectError, match="interpolation") as e:
        compose_raw(["platform=sm90", "overlay=[leak]"], conf_copy)
    assert "hunter2" not in str(e.value)
    assert select_main(["platform=sm90", "model.name=${oc.env:KSELECT_TEST_SECRET}"]) == 2
    assert "hunter2" not in capsys.readouterr().err


@pytest.mark.parametrize("value,ok", [
    ("${${model.name}:KSELECT_TEST_SECRET}", False),  # a resolver through a nested name (model.name is oc.env)
    ("${oc.env:KSELECT_TEST_SECRET}", False), ("${ oc.env:KSELECT_TEST_SECRET}", False), ("x${oc.decode:'1'}", False),
    ("${model.name}", True), ("${.name}", True),  # plain references: what the matrix compose supports
])  # fmt: skip
def test_group_options_interpolate_only_plain_references(conf_copy, monkeypatch, value, ok):
    monkeypatch.setenv("KSELECT_TEST_SECRET", "hunter2")
    (conf_copy / "model" / "leak.yaml").write_text(
        f"defaults:\n  - gemma4_tiny\n  - _self_\nname: oc.env\ncheckpoint: \"{value}\"\n"
    )
    if ok:
        assert compose_raw(["platform=sm90", "model=leak"], conf_copy)["model"]["checkpoint"] == "oc.env"
        return
    with pytest.raises(KSelectError, match="interpolation") as e:
        compose_raw(["platform=sm90", "model=leak"], conf_copy)
    assert "hunter2" not in str(e.value) and "leak.yaml: checkpoint" in str(e.value)


@pytest.mark.parametrize("where", ["overlay/plain.yaml", "rules/plain.yaml"])
def test_overlays_and_rules_hold_no_interpolation_at_all(conf_copy, where):
    body = "x_rule:\n  stage: warning\n  enabled: true\n  reason: 'head ${model.head_dim}'\n"
    text = ("# @package _global_\noverlays:\n  plain: x\nrules:\n" + body.replace("\n", "\n  ").rstrip() + "\n"
            if where.startswith("overlay") else (conf_copy / "rules" / "post_pr52987.yaml").read_text() + body)
    (conf_copy / where).write_text(text)
    over = ["overlay=[plain]"] if where.startswith("overlay") else ["rules=plain"]
    with pytest.raises(KSelectError, match=r"plain.yaml: .*interpolation '.*\$\{model.head_dim\}' is not allowed"):
        compose_raw(["platform=sm90", *over], conf_copy)


@pytest.mark.parametrize("override", ["platform.gpu_model=../../../tmp/forged", "overlay=[../../tmp/x]", "platform=../platform/sm90",
                                      "model=gemma4_31b/../gemma4_e2b"])  # fmt: skip
def test_names_stay_inside_conf(override, tmp_path, capsys):
    assert select_main(["platform=sm90", override]) == 2
    err = capsys.readouterr().err
    assert override.split("=")[0].split(".")[0] in err


def test_forged_conformance_file_outside_conf_is_never_read(tmp_path, capsys):
    forged = tmp_path / "forged.yaml"
    forged.write_text("gpu: forged\nclaim_count: 0\nclaims: {}\n")
    rel = os.path.relpath(forged.with_suffix(""), sel_conformance.CONFORMANCE_DIR)
    assert select_main(["platform=sm90", f"platform.gpu_model={rel}"]) == 2
    assert "gpu_model" in capsys.readouterr().err


def test_alias_bomb_refused_quickly(conf_copy, tmp_path):
    assert len(BOMB) < 500
    (tmp_path / "m.yaml").write_text(BOMB)
    with pytest.raises(FileError, match="alias"):  # refused before expansion (it was 70 s and all memory)
        load_yaml(tmp_path / "m.yaml")
    (conf_copy / "overlay" / "bomb.yaml").write_text("# @package _global_\n" + BOMB)
    with pytest.raises(KSelectError, match="alias"):
        compose_raw(["platform=sm90", "overlay=[bomb]"], conf_copy)


# ---------------------------------------------------------------- checkpoints


def _tiny_folder(tmp_path: Path, **over) -> Path:
    from kselect.gemma4.checkpoint import build_random, save_checkpoint
    from kselect.gemma4.config import Gemma4Args

    args = Gemma4Args(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8)  # fmt: skip
    folder = tmp_path / "ck"
    save_checkpoint(build_random(args), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(over)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_checkpoint_sizes_checked_before_any_tensor(tmp_path, monkeypatch):
    from kselect.gemma4 import checkpoint

    folders = [_tiny_folder(tmp_path / "a", intermediate_size=200000), _tiny_folder(tmp_path / "b", num_key_value_heads=0),
               _tiny_folder(tmp_path / "c", vocab_size=10**12), _tiny_folder(tmp_path / "d", num_hidden_layers=10**9)]

    def no_model(*a, **k):
        raise AssertionError("the model was built from an unchecked config")

    monkeypatch.setattr(checkpoint, "Gemma4", no_model)
    for folder, what in zip(folders, ["describes at least", "num_key_value_heads", "vocab_size", "num_hidden_layers"]):
        with pytest.raises(checkpoint.CheckpointError, match=what):
            checkpoint.load_checkpoint(folder)


def test_checkpoint_config_and_tokenizer_errors_are_one_line(tmp_path):
    from kselect.gemma4.checkpoint import CheckpointError, load_tokenizer, read_config

    folder = _tiny_folder(tmp_path)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="expected an object"):
        read_config(folder)
    (folder / "tokenizer.json").write_text('{"model": 1}')
    with pytest.raises(CheckpointError) as e:
        load_tokenizer(folder)
    assert "tokenizer.json" in str(e.value) and "\n" not in str(e.value)


def test_pickle_checkpoints_are_refused(tmp_path):
    from kselect.gemma4.checkpoint import CheckpointError, load_checkpoint

    folder = _tiny_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle checkpoints are not loaded"):
        load_checkpoint(folder)


# ---------------------------------------------------------------- data safety


def test_atomic_write_keeps_the_old_file_when_killed(tmp_path, monkeypatch):
    p = tmp_path / "results.yaml"
    p.write_text("measured: 135 claims\n")

    def killed(fd):
        raise KeyboardInterrupt  # what a kill between write and rename leaves behind

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(p, "x" * 1000)
    assert p.read_text() == "measured: 135 claims\n"
    assert [x.name for x in tmp_path.iterdir()] == ["results.yaml"]  # no temp file left


def test_atomic_write_gives_the_mode_a_plain_open_would(tmp_path):
    """Not mkstemp's owner-only 0600: a plot or results file stays readable as the umask allows."""
    old = os.umask(0o027)
    try:
        p = atomic_write(tmp_path / "plot.html", "<html/>")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o640


def test_a_killed_checkpoint_save_keeps_the_old_weights(tmp_path, monkeypatch):
    import safetensors.torch

    folder = _tiny_folder(tmp_path)
    before = (folder / "model.safetensors").read_bytes()
    from kselect.gemma4.checkpoint import load_checkpoint, save_checkpoint

    model = load_checkpoint(folder)

    def killed(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(model, folder)
    assert (folder / "model.safetensors").read_bytes() == before
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# Appending to a journal is not a rewrite: the oracle's resume reader drops an unterminated last line.
APPEND_JOURNALS = {"kselect/oracle/run.py"}  # append-only; readers drop a torn last line
# files written inside a fresh temporary folder that is renamed into place whole (or a lock file, not an output)
WRITES_IN_A_TEMP_FOLDER = {"kselect/oracle/env.py", "kselect/oracle/vllm_chain.py",
                           "kselect/measurement/kernels/attn_sass.py"}  # the cubin it disassembles


def test_no_writer_opens_its_output_for_writing_in_place():
    """Every writer of results (conformance, plot, sweep, the measurement programs, kselect/measurement/vllm's oracle
    scripts) goes through files.atomic_write (kselect/measurement/vllm imports it inside vLLM's venv)."""
    offenders = []
    paths = [*ROOT.glob("selector/**/*.py"), *ROOT.glob("kselect/**/*.py"), *ROOT.glob("gemma4/*.py")]
    assert {"agree.py", "export_roundtrip.py", "make_fixture.py"} <= {p.name for p in paths if "vllm" in p.parts}
    assert {"run.py", "env.py", "worker.py"} <= {p.name for p in paths if "oracle" in p.parts}
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if rel in WRITES_IN_A_TEMP_FOLDER:
            continue
        text = path.read_text()
        needles = ['.write_text(', '.write_bytes(', 'open(args.out, "w")', '"w") as f', '.savefig(p', '"wb") as f', '.open("w")']
        needles += [] if rel in APPEND_JOURNALS else ['.open("a")', '"a") as f']
        for needle in needles:
            if needle in text and path.name != "files.py":
                offenders.append(f"{rel}: {needle}")
    assert not offenders, offenders


CLAIM = "TORCH_REFERENCE:bf16:d64:causal"


def test_conformance_out_merges_and_says_what_changed(tmp_path, capsys):
    from kselect.commands import conformance

    out = tmp_path / "cpu_ci.yaml"
    kept = {"TRITON_ATTN:bf16:d256:causal": {"status": "verified", "rel_err": 0.001, "detail": "from the H200"},
            CLAIM: {"status": "refuted", "rel_err": 0.5, "detail": "old"}}  # fmt: skip
    out.write_text(yaml.safe_dump({"gpu": "cpu_ci", "claim_count": 2, "claims": kept}))
    assert call_main(conformance.main, ["--claims", CLAIM, "--gpu-name", "cpu_ci", "--device", "cpu", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["claim_count"] == 2 and doc["claims"]["TRITON_ATTN:bf16:d256:causal"]["detail"] == "from the H200"
    assert doc["claims"][CLAIM]["status"] == "verified"
    said = capsys.readouterr().out
    assert "1 re-run (replaced), 0 new, 1 kept" in said and f"changed  {CLAIM}: refuted -> verified" in said


def test_conformance_refuses_a_gpu_name_that_is_not_this_device(tmp_path, capsys):
    from kselect.commands import conformance

    argv = ["--claims", CLAIM, "--gpu-name", "nvidia_h200", "--device", "cpu", "--out", str(tmp_path / "o.yaml")]
    assert call_main(conformance.main, argv) == 2
    assert "does not match this device" in capsys.readouterr().err
    assert not (tmp_path / "o.yaml").exists()


H200 = (CONF_DIR / "conformance" / "nvidia_h200.yaml").read_text()


@pytest.mark.parametrize("damage", ["truncated", "empty", "dangling", "status", "cut_mid"])
def test_corrupted_conformance_file_is_an_error_not_unverified(damage, tmp_path, capsys):
    p = tmp_path / "nvidia_h200.yaml"
    lines = H200.splitlines(keepends=True)
    if damage == "truncated":
        p.write_text("".join(lines[: len(lines) * 2 // 3]))
    elif damage == "cut_mid":
        p.write_text(H200[: len(H200) // 2])
    elif damage == "empty":
        p.write_text("")
    elif damage == "dangling":
        p.symlink_to(tmp_path / "gone.yaml")
    else:
        p.write_text(H200.replace("status: refuted", "status: refutd", 1))
    assert select_under(tmp_path, ["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"]) == 2
    err = capsys.readouterr().err
    assert "nvidia_h200.yaml" in err and "Traceback" not in err


def test_a_conformance_claim_of_a_build_nothing_runs_is_refused(tmp_path, capsys):
    """`FLASH_ATTN_v4+upstream:...` matches the id grammar but names a build FA4 does not have: the file is an error
    naming it (one paragraph, exit 2), not a claim kept and never read."""
    doc = yaml.safe_load(H200)
    doc["claims"]["FLASH_ATTN_v4+upstream:bf16:d256:window"] = {"status": "verified", "rel_err": 0.001}
    doc["claim_count"] += 1
    (tmp_path / "nvidia_h200.yaml").write_text(yaml.safe_dump(doc))
    assert select_under(tmp_path, ["platform=sm90", "model=gemma4_31b"]) == 2
    err = capsys.readouterr().err
    assert "nvidia_h200.yaml" in err and "FLASH_ATTN_v4+upstream" in err and "allowed: none" in err
    assert "Traceback" not in err and err.count("\n") <= 2


def test_committed_conformance_files_validate():
    for p in (CONF_DIR / "conformance").glob("*.yaml"):
        assert sel_conformance.read_file(p).claim_count == len(sel_conformance.read_file(p).claims)


def _write_jobs(d: Path, sweep: str, n: int, nums) -> None:
    for i in nums:
        atomic_write(d / str(i) / "selection.json", json.dumps({
            "overrides": [f"platform=cpu"], "outcome": "invalid", "error": "x", "job": {"num": i, "launcher": "basic"},
            "sweep": {"id": sweep, "jobs": n}}))  # fmt: skip


def test_gather_reports_mixed_and_missing_jobs(tmp_path, capsys):
    from kselect.commands.gather import main

    _write_jobs(tmp_path / "a", "s1", 4, range(4))
    _write_jobs(tmp_path / "a", "s2", 2, range(2))  # a second sweep into the same directory
    assert call_main(main, [str(tmp_path / "a")]) == 2
    assert "mixes jobs of 2 sweeps" in capsys.readouterr().err
    _write_jobs(tmp_path / "b", "s1", 4, [0, 2])
    assert call_main(main, [str(tmp_path / "b")]) == 2
    assert "missing job(s) 1, 3" in capsys.readouterr().err
    _write_jobs(tmp_path / "c", "s1", 2, [0, 1])
    assert call_main(main, [str(tmp_path / "c")]) == 0


def test_sweep_refuses_a_directory_that_holds_another_sweep(tmp_path, monkeypatch, capsys):
    from kselect.commands import sweep

    _write_jobs(tmp_path / "d", "s1", 1, [0])
    monkeypatch.chdir(tmp_path)
    assert call_main(sweep.main, ["-m", "platform=cpu", f"hydra.sweep.dir={tmp_path / 'd'}"]) == 2
    assert "already holds" in capsys.readouterr().err


def test_sweep_jobs_record_their_sweep(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    p = subprocess.run([sys.executable, "-m", "kselect", "sweep", "-m", "platform=cpu,sm90", "model=gemma4_tiny",
                        f"hydra.sweep.dir={tmp_path / 's'}"], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    recs = [json.loads((tmp_path / "s" / str(i) / "selection.json").read_text()) for i in range(2)]
    assert recs[0]["sweep"]["id"] == recs[1]["sweep"]["id"] and recs[0]["sweep"]["jobs"] == 2


def test_yaml_is_read_safely_and_through_libyaml_when_present(tmp_path):
    from kselect.selector.base import files

    # PyYAML built with libyaml: its safe loader (the pure-Python one took seconds on the perf file)
    assert files._LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    p = tmp_path / "evil.yaml"
    p.write_text("x: !!python/object/apply:os.system ['echo pwned']\n")  # never runs code
    with pytest.raises(FileError, match="not valid YAML"):
        load_yaml(p)
    p.write_text("a: [1, 2]\nb: {c: 3}\n")
    assert load_yaml(p) == {"a": [1, 2], "b": {"c": 3}}
