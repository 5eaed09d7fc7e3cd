"""Issue #49: the inputs that still ended in a traceback, were accepted, named the wrong key or wrote outside the
asked place, each through the real `kselect <command>` entry point (kselect/cli.py, the command's Hydra app) in
this process, a few as real processes. Each test failed on the code before its fix."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kselect_inprocess import kselect_main

from kselect.selector.api import CONF_DIR
from kselect.selector.base.cli_errors import call_main

ROOT = Path(__file__).resolve().parents[2]
LLAMA = yaml.safe_load((CONF_DIR / "model" / "llama3_1_8b.yaml").read_text())["hf_config"]
SCOUT = yaml.safe_load((CONF_DIR / "model" / "llama4_scout.yaml").read_text())["hf_config"]
BIG = "7" * 5000


def kselect(capsys, command: str, *argv: str, code: int = 2) -> str:
    """stderr of `kselect command argv`, held to the contract: exit `code`, one paragraph, no traceback."""
    got = call_main(kselect_main(command), list(argv))
    out, err = capsys.readouterr()
    assert got == code, (got, err[-2000:], out[-300:])
    assert "Traceback" not in err and err.strip() and "\n\n" not in err.strip(), err[-2000:]
    assert code == 3 or "internal error" not in err, err[-2000:]
    return err


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KSELECT_DEBUG", raising=False)
    return tmp_path


# ---------------------------------------------------------------- a config.json of the wrong types (model.hf_config)

WRONG_DTYPES = [
    (dict(LLAMA, torch_dtype=["bfloat16"]), "model.hf_config.torch_dtype"),
    (dict(LLAMA, torch_dtype={"a": "bfloat16"}), "model.hf_config.torch_dtype"),
    (dict({k: v for k, v in LLAMA.items() if k != "torch_dtype"}, dtype=["bfloat16"]), "model.hf_config.dtype"),
    (dict(SCOUT, text_config=dict(SCOUT["text_config"], torch_dtype=["bfloat16"])), "model.hf_config.text_config.torch_dtype"),
]


@pytest.mark.parametrize("command,extra", [("select", ()), ("select", ("output=markdown",)), ("explain", ()),
                                           ("run", ("--no-check",))])
@pytest.mark.parametrize("i", range(len(WRONG_DTYPES)))
def test_a_dtype_of_the_wrong_type_names_its_field(command, extra, i, cwd, capsys):
    # before: TypeError: unhashable type: 'list' (or 'dict'), a traceback
    cfg, key = WRONG_DTYPES[i]
    (cwd / "c.json").write_text(json.dumps(cfg))
    err = kselect(capsys, command, "platform=sm90", "model=hf", "model.hf_config=c.json", *extra)
    assert key in err and "allowed: a string" in err, err


def test_a_deep_list_in_a_field_never_read_names_the_file(cwd, capsys):
    # before: RecursionError while decoding, a traceback
    (cwd / "c.json").write_text(json.dumps(LLAMA)[:-1] + ', "unused": ' + "[" * 5000 + "]" * 5000 + "}")
    err = kselect(capsys, "select", "platform=sm90", "model=hf", "model.hf_config=c.json")
    assert "model.hf_config='c.json'" in err and "nested deeper than 64" in err


@pytest.mark.parametrize("path,words", [("/proc/self/pagemap", "under /proc"), ("/proc/self/mem", "under /proc"),
                                        ("a" * 300, "a path component of 300 bytes"), ("/dev/zero", "under /dev")])
def test_a_special_or_overlong_config_path_is_refused_before_it_is_opened(path, words, cwd, capsys):
    # before: OSError (EINVAL, EIO, ENAMETOOLONG), a traceback
    err = kselect(capsys, "select", "platform=sm90", "model=hf", f"model.hf_config={path}")
    assert "model.hf_config=" in err and words in err and len(err) < 600, err


def test_a_fifo_config_does_not_hang(cwd, capsys):
    os.mkfifo(cwd / "c.json")
    err = kselect(capsys, "select", "platform=sm90", "model=hf", "model.hf_config=c.json")
    assert "model.hf_config='c.json'" in err and "FIFO" in err


def test_a_huge_integer_in_a_config_names_the_file_and_key(cwd, capsys):
    # before: "invalid config: model: Exceeds the limit (4300 digits)...": neither the file nor the key
    (cwd / "c.json").write_text(json.dumps(LLAMA)[:-1] + f', "vocab_size": {BIG}}}')
    err = kselect(capsys, "select", "platform=sm90", "model=hf", "model.hf_config=c.json")
    assert "c.json" in err and "vocab_size: an integer of more than 100 digits" in err


def test_a_huge_integer_override_names_its_key_once(cwd, capsys):
    # before: every override named, each 5000 digits long, and Python's advice to raise its limit
    err = kselect(capsys, "select", "platform=sm90", f"model.head_dim={BIG}")
    assert "model.head_dim=777" in err and "platform=sm90" not in err and len(err) < 400, err


# ---------------------------------------------------------------- run's own files and prompt

def test_a_checkpoint_config_with_a_huge_integer(cwd, capsys):
    # before: ValueError: Exceeds the limit (4300 digits) for integer string conversion, a traceback
    (cwd / "ck").mkdir()
    (cwd / "ck" / "config.json").write_text(f'{{"model_type": "gemma4_text", "vocab_size": {BIG}}}')
    err = kselect(capsys, "run", "platform=cpu", "model.checkpoint=ck", "--no-check", "--max-new-tokens", "1")
    assert "ck/config.json" in err and "vocab_size" in err and "100 digits" in err


def test_a_drafter_config_with_a_huge_integer(cwd, capsys):
    (cwd / "dr").mkdir()
    (cwd / "dr" / "config.json").write_text(f'{{"model_type": "gemma4_assistant", "x": {BIG}}}')
    err = kselect(capsys, "run", "platform=cpu", "spec_decode=mtp", "--drafter", "dr", "--no-check", "--max-new-tokens", "1")
    assert "--drafter" in err and "dr/config.json" in err and "x: an integer" in err


def test_a_prompt_that_is_not_utf8(cwd, capsys):
    # before: TypeError from the tokenizer (a lone surrogate, which is how Python passes invalid UTF-8 in argv)
    err = kselect(capsys, "run", "platform=cpu", "--no-check", "--prompt", "ab\udcff")
    assert "--prompt" in err and "not valid UTF-8" in err


# ---------------------------------------------------------------- the wrong key named

def test_diff_names_conf_path(cwd, capsys):
    # before: "diff: conf='../x'", a key diff does not have (conf= is the old spelling of conf_path=)
    err = kselect(capsys, "diff", "conf_path=../x")
    assert "conf_path='../x'" in err


# ---------------------------------------------------------------- oracle

@pytest.fixture
def no_network(tmp_path, monkeypatch):
    """A fake HOME; any registry query, download or cache folder fails the test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KSELECT_VLLM_HOME", raising=False)
    from kselect.oracle import env

    monkeypatch.setattr(env, "_download", lambda *a, **k: pytest.fail("downloaded"))
    monkeypatch.setattr(env, "latest_version", lambda: pytest.fail("queried the registry"))
    monkeypatch.setattr(env.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    return home


@pytest.mark.parametrize("source", ["0.34.0\n", "0.34.0 ", "\n0.34.0", "0.34.0\x00"])
def test_oracle_refuses_a_version_with_a_newline_before_downloading(source, cwd, no_network, capsys):
    # before: `0.34.0\n` passed the version regex (its `$`) and downloaded the wheel
    err = kselect(capsys, "oracle", source, "--dry-run")
    assert (repr(source) in err and "control character" in err) if not source.isprintable() else "not a version" in err, err
    assert not (no_network / ".cache").exists()


def test_oracle_checks_out_before_the_registry_or_the_cache(cwd, no_network, capsys):
    # before: queried the registry and created ~/.cache/kselect/vllm/wheels, then refused --out
    err = kselect(capsys, "oracle", "0.0.0", "--out", "/nonexistent/dir/x")
    assert "--out" in err and "/nonexistent/dir" in err and "does not exist" in err
    assert not list(no_network.iterdir()) and [p.name for p in cwd.iterdir()] == ["home"]


def test_oracle_names_a_long_source_not_out(cwd, no_network, capsys):
    # before: "--out None: not an oracle record" (an OSError from stat() of the source)
    err = kselect(capsys, "oracle", "a" * 300)
    assert "SOURCE" in err and "300 bytes" in err and "--out" not in err and len(err) < 400, err


def test_a_source_tree_version_never_reaches_a_path(cwd, no_network, capsys):
    # before: a lock file at <cache>/.lock-../../../x
    (cwd / "tree" / "vllm").mkdir(parents=True)
    (cwd / "tree" / "vllm" / "__init__.py").write_text("")
    (cwd / "tree" / "vllm" / "_version.py").write_text('__version__ = "../../../x"\n')
    err = kselect(capsys, "oracle", "./tree", "--dry-run")
    assert "'../../../x'" in err and "not a release version" in err
    assert not (no_network / ".cache").exists()


def _tree(root: Path) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm-9.9.9.dist-info").mkdir()
    (root / "vllm-9.9.9.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 9.9.9\n")
    return root


@pytest.mark.parametrize("name,content,words", [
    ("r.jsonl.gz", b"not gzip at all\n", "not gzip"),
    ("r.jsonl", b"[1, 2]\n", "line 1 is a JSON list"),
    ("r.jsonl", b'{"key": 1}\n', "without a string key"),
    ("r.jsonl.gz", gzip.compress(b'{"key": "k", "n": ' + BIG.encode() + b"}\n", mtime=0), "n: an integer"),
], ids=["not-gzip", "a-list", "no-key", "huge-int"])  # fmt: skip
def test_oracle_out_that_is_no_record(name, content, words, cwd, no_network, capsys):
    # before: gzip.BadGzipFile and TypeError tracebacks
    _tree(cwd / "src")
    (cwd / name).write_bytes(content)
    err = kselect(capsys, "oracle", "./src", "--out", name, "--dry-run")
    assert "--out: not an oracle record" in err and name in err and words in err, err


@pytest.mark.parametrize("out", ["/proc/self/mem", "/dev/null/x", "fifo"])
def test_oracle_out_special_files(out, cwd, no_network, capsys):
    # before: OSError tracebacks
    _tree(cwd / "src")
    os.mkfifo(cwd / "fifo")
    err = kselect(capsys, "oracle", "./src", "--out", out, "--dry-run")
    assert "--out" in err and out in err and ("special file" in err or "not a directory" in err), err


# ---------------------------------------------------------------- the backstop: a bug is exit 3, one paragraph

def _boom(*a, **k):
    raise RuntimeError("injected\nbug")


SPACED = "+hydra.job.env_set.X='a b'"  # an override the shell must quote


@pytest.mark.parametrize("command,target,argv", [
    ("select", "kselect.commands.select.select", ["platform=sm90", SPACED]),
    ("explain", "kselect.selector.measure.explain.explain", ["platform=sm90", SPACED]),
    ("explain", "kselect.selector.measure.explain.explain", ["platform=sm90"]),  # overrides only: no Hydra app
    ("claims", "kselect.commands.claims.selection_claims", ["platform=sm90"]),
    ("run", "kselect.run.select", ["platform=cpu", SPACED]),
    ("oracle", "kselect.oracle.track._cells", ["0.34.0", "--dry-run", "--rules", "it's"]),
    ("bench", "kselect.commands.bench.main", ["experiment=e2e_smoke", "dry_run=true", "it's"]),
    ("conformance", "kselect.commands.conformance.main", ["--device", "cpu", "it's"]),
])  # fmt: skip
def test_a_bug_is_exit_3_with_the_command_to_report(command, target, argv, cwd, capsys, monkeypatch):
    # before: a traceback (exit 1) from select, explain, run, oracle and bench; exit 2 calling a bug bad input elsewhere
    module, _, attr = target.rpartition(".")
    monkeypatch.setattr(__import__(module, fromlist=[attr]), attr, _boom)
    err = kselect(capsys, command, *argv, code=3)
    from importlib.metadata import version

    assert f"internal error in kselect {version('kselect')}: RuntimeError: injected bug; please report it" in err
    assert f"with this command: {shlex.join(['kselect', command, *argv])} (rerun" in err, err  # as the shell takes it


def test_debug_shows_the_traceback(cwd, monkeypatch):
    monkeypatch.setattr(__import__("kselect.commands.select", fromlist=["select"]), "select", _boom)
    with pytest.raises(RuntimeError, match="injected"):
        call_main(kselect_main("select"), ["platform=sm90", "--debug"])


BUG = "import kselect.commands.select as m; m.select = lambda *a: 1 / 0; "


@pytest.mark.parametrize("entry", [
    BUG + "from kselect.cli import main; main(['select', 'platform=sm90'])",
    BUG + "import sys; sys.argv = ['x', 'platform=sm90']; m.cli()",  # `python -m kselect.commands.select`
])
def test_a_bug_in_a_real_process(entry, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KSELECT_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", entry], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "internal error in kselect" in r.stderr and "ZeroDivisionError" in r.stderr and "kselect select platform=sm90" in r.stderr


# ---------------------------------------------------------------- -m: where Hydra writes

def test_multirun_says_where_it_writes(cwd, capsys):
    # before: multirun/ appeared in the current folder, unannounced
    assert call_main(kselect_main("select"), ["-m", "platform=sm80,sm90"]) == 0
    err = capsys.readouterr().err
    (made,) = list(cwd.iterdir())
    assert made.name == "multirun" and f"under {cwd}/multirun/" in err, err
    assert call_main(kselect_main("select"), ["-m", "platform=sm90", f"hydra.sweep.dir={cwd}/elsewhere"]) == 0
    assert f"under {cwd}/elsewhere/" in capsys.readouterr().err and sorted(p.name for p in cwd.iterdir()) == ["elsewhere", "multirun"]
