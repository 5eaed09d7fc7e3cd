"""`kselect oracle` end to end without vLLM: the release is a fake source folder, its python is
this one on tests/vllm/fake_worker.py; bad input exits 2 with one paragraph; the agreement
threshold sets the exit status; kselect's side never imports vLLM."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kselect.commands import oracle as cli
from kselect.oracle import env, track
from kselect.oracle.cells import Cell, grid
from kselect.oracle.compare import kselect_records

FAKE = Path(__file__).parent / "fake_worker.py"
CELLS = grid(ccs=["9.0"], models=["gemma4_31b"], kv_dtypes=["auto", "fp8"], multimodal=[False], fa_pins=[None],
             backends=["auto", "TRITON_ATTN"], spec=["none"])
FILTERS = ["--cc", "9.0", "--model", "gemma4_31b", "--kv", "auto", "fp8", "--mm", "0", "--fa", "-",
           "--backend", "auto", "TRITON_ATTN", "--spec", "none"]


def fake_tree(root: Path, version="9.9.9") -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / f"vllm-{version}.dist-info").mkdir()
    (root / f"vllm-{version}.dist-info" / "METADATA").write_text(
        f"Name: vllm\nVersion: {version}\nRequires-Dist: flashinfer-python==0.7.3\n")
    return root


@pytest.fixture
def fake_release(tmp_path, monkeypatch):
    """A source tree whose 'venv' is this python on the fake worker, records saying what kselect's
    rules=vllm_0_33_0 says (so agreement is 100% unless a test changes one)."""
    tree = fake_tree(tmp_path / "src")
    monkeypatch.setattr(env, "ensure", lambda release, **k: env.Env(release.version, release.src,
                                                                     Path(sys.executable), "0.7.3"))
    monkeypatch.setattr(track, "worker_cmd", lambda e: [sys.executable, str(FAKE), "--src", str(e.src),
                                                      "--version", e.version])
    ks = kselect_records(CELLS, rules="vllm_0_33_0")
    truth = {}
    for c in CELLS:
        k = ks[c.key]
        groups = {g: {f: v[f] for f in ("backend", "fa_version", "kernel_block", "kv_block", "quant_query")}
                  for g, v in k["groups"].items()}
        err = None if k["error"] is None else {"stage": "selection", "type": "ValueError", "message": k["error"],
                                               "where": ""}
        truth[c.key] = {"groups": groups, "error": err, "block_size": None, "selections": []}
    path = tmp_path / "truth.json"
    path.write_text(json.dumps(truth))
    monkeypatch.setenv("FAKE_ORACLE_TRUTH", str(path))
    return tree, truth, path


def test_runs_compares_and_passes_at_full_agreement(fake_release, tmp_path, capsys):
    tree, _, _ = fake_release
    out = tmp_path / "rec.jsonl.gz"
    rc = cli.main([str(tree), "--rules", "vllm_0_33_0", "--out", str(out), "--min-agreement", "100",
                   "--report", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json"), *FILTERS])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "| backend |" in text and "Disagreements: 0" in text
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["vllm"] == "9.9.9" and rep["cells"] == len(CELLS) and rep["overall"] == 1.0
    assert "rules=vllm_0_33_0" in (tmp_path / "r.md").read_text()


def test_a_disagreement_below_the_bar_exits_1_with_its_class(fake_release, tmp_path, capsys):
    tree, truth, path = fake_release
    key = next(k for k, r in truth.items() if not r["error"])
    truth[key]["groups"]["full_attention"]["kernel_block"] = 4096
    path.write_text(json.dumps(truth))
    args = [str(tree), "--rules", "vllm_0_33_0", "--out", str(tmp_path / "r.jsonl"), *FILTERS]
    assert cli.main([*args, "--min-agreement", "99.5"]) == 1
    text = capsys.readouterr().out
    assert "4096" in text and key in text and "below --min-agreement 99.5%: kernel_block" in text
    assert cli.main([*args, "--min-agreement", "50"]) == 0  # the record is reused, the bar alone moves


def test_a_cell_kselect_refuses_where_vllm_selects_counts():
    """No exclusions: vLLM selecting where kselect exits 2 (as for a setting vLLM ignores) is an
    error disagreement, and each of vLLM's groups counts as checks kselect failed."""
    from kselect.oracle.compare import compare, to_json

    c = Cell("8.0", "gemma4_e4b", "auto", False, 3, "auto", "none")  # an FA pin no SM80 layer runs
    g = {"backend": "TRITON_ATTN", "fa_version": None, "kernel_block": 16, "kv_block": 16, "quant_query": False}
    rec = {"key": c.key, "cell": c.to_dict(), "error": None, "groups": {"sliding_window": g, "full_attention": g}}
    ks = {c.key: {"groups": {}, "error": "attention.flash_attn_version=3: no group runs FlashAttention"}}
    rep = compare([rec], kselect=ks)
    assert rep.cells == 1 and rep.checks["error"] == 1 and rep.agree["error"] == 0
    assert all(rep.checks[f] == 2 and rep.agree[f] == 0 for f in ("backend", "kernel_block", "quant_query"))
    cls = to_json(rep)["classes"]
    assert [c["cause"] for c in cls if c["field"] == "error"] == ["vLLM selects; kselect refuses (attention.flash_attn_version=N: no group runs FlashAttention)"]
    ks[c.key] = {"groups": {"sliding_window": g, "full_attention": g}, "error": None, "warnings": ["setting_ignored"]}
    assert compare([rec], kselect=ks).rate() == 1.0  # selecting as vLLM does (with a warning) agrees


@pytest.mark.parametrize("argv, words", [
    (["not-a-version!"], ["not-a-version!", "not a version"]),
    (["/no/such/vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"], ["no such file", ".whl"]),
    (["./no/such/tree"], ["no such folder"]),
    (["0.34.0", "--min-agreement", "101"], ["'101'", "between 0 and 100"]),
    (["0.34.0", "--min-agreement", "abc"], ["'abc'", "percentage"]),
    (["0.34.0", "--rules", "vllm_9_9_9"], ["vllm_9_9_9", "allowed:", "vllm_0_33_0"]),
    (["0.34.0", "--cc", "7.5"], ["--cc '7.5'", "allowed: 8.0"]),
    (["0.34.0", "--jobs", "0"], ["'0'", "at least 1"]),
    (["0.34.0", "--out", "/no/such/dir/r.jsonl.gz"], ["/no/such/dir", "does not exist"]),
    (["0.34.0", "--bogus"], ["--bogus"]),
])
def test_bad_input_exits_2_with_one_paragraph(argv, words, tmp_path, monkeypatch):
    monkeypatch.setattr(env, "home", lambda: tmp_path)  # no cached wheels: nothing reaches the registry
    monkeypatch.setattr(env, "_download", lambda v, root: pytest.fail("downloaded for bad input"))
    if argv[0] == "0.34.0":  # a well-formed release; the other argument is the bad one
        (tmp_path / "wheels").mkdir()
        import zipfile

        with zipfile.ZipFile(tmp_path / "wheels" / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as z:
            z.writestr("vllm/__init__.py", "")
    r = subprocess.run([sys.executable, "-c", "import sys; from kselect.commands import oracle as cli; from kselect.oracle import env; from pathlib import Path;"
                        f"env.home = lambda: Path({str(tmp_path)!r}); sys.exit(cli.main(sys.argv[1:]))", *argv],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert "Traceback" not in err and "\n\n" not in err and err.count("\n") <= 1
    for w in words:
        assert w in err, err


def test_an_unknown_release_is_bad_input(tmp_path, monkeypatch):
    """pip finds no such wheel: one paragraph naming the version (pip itself is not run here)."""
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for vllm==0.0.999\n")
    monkeypatch.setattr(env.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(env.SourceError, match=r"vLLM release 0\.0\.999: no wheel on the package registry.*No matching"):
        env.resolve("0.0.999", root=tmp_path)
    assert not list((tmp_path / "wheels").glob("*"))


def test_help_exits_0():
    r = subprocess.run([sys.executable, "-m", "kselect", "oracle", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--min-agreement" in r.stdout and "--ray-address" in r.stdout


def test_kselect_side_never_imports_vllm_and_the_worker_imports_no_kselect():
    code = ("import sys; import kselect.commands.oracle, kselect.oracle.run, kselect.oracle.env, kselect.oracle.compare;"
            "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.') or m == 'torch'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
    import ast

    for name in ("worker.py", "vllm_chain.py"):
        tree = ast.parse((Path(env.__file__).parent / name).read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not [m for m in mods if m.split(".")[0] == "kselect"], name


def test_source_resolution(tmp_path):
    tree = fake_tree(tmp_path / "t", "0.35.0rc1")
    assert env.resolve(str(tree), root=tmp_path) == env.Release("0.35.0rc1", None, tree.resolve())
    import zipfile

    whl = tmp_path / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("vllm/__init__.py", "")
        z.writestr("vllm/_C.abi3.so", "binary")
        z.writestr("vllm-0.34.0.dist-info/METADATA",
                   "Version: 0.34.0\nRequires-Dist: transformers<5.23.0,>=5.16.1\nRequires-Dist: flashinfer-python==0.7.3\n")
    rel = env.resolve(str(whl), root=tmp_path)
    assert rel.version == "0.34.0" and rel.wheel == whl.resolve()
    built = []

    def fake_venv(version, meta, root, pip, quiet):  # the venv itself is pip's job; its inputs are checked
        built.append(env.requirement(meta, "transformers"))
        (root / f"venv-{version}").mkdir(exist_ok=True)
        return root / f"venv-{version}"

    orig = env._ensure_venv
    env._ensure_venv = fake_venv
    try:
        e1 = env.ensure(rel, root=tmp_path)
        e2 = env.ensure(rel, root=tmp_path)
    finally:
        env._ensure_venv = orig
    assert e1 == e2 and e1.flashinfer == "0.7.3" and built == ["<5.23.0,>=5.16.1"] * 2
    assert (e1.src / "vllm" / "__init__.py").is_file() and not (e1.src / "vllm" / "_C.abi3.so").exists()
    assert (e1.src / ".done").is_file() and not list(tmp_path.glob(".src-*"))
    (tmp_path / "wheels").mkdir()
    whl.rename(tmp_path / "wheels" / whl.name)
    assert env.resolve("0.34.0", root=tmp_path, download=lambda v, r: pytest.fail("not cached")).wheel.parent.name == "wheels"


def test_a_foreign_out_file_is_bad_input(tmp_path, capsys):
    tree = fake_tree(tmp_path / "src")
    out = tmp_path / "r.jsonl"
    out.write_text("this is not json\n")
    assert cli.main([str(tree), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "not an oracle record" in err and "\n\n" not in err.strip()


def test_ray_address_without_ray_installed_is_bad_input(fake_release, tmp_path, monkeypatch, capsys):
    tree, _, _ = fake_release
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as on an install without kselect[ray]
    out = tmp_path / "r.jsonl.gz"
    assert cli.main([str(tree), "--out", str(out), "--ray-address", "local", "--no-compare", *FILTERS]) == 2
    err = capsys.readouterr().err
    assert "--ray-address local" in err and "pip install 'kselect[ray]'" in err and not out.exists()


@pytest.mark.slow
def test_ray_address_local_writes_the_local_runs_bytes(fake_release, tmp_path, capsys):
    """The command end to end: `--ray-address local` (Ray started here, the batches as actors) and a run without it
    write the same record, byte for byte, and compare alike."""
    pytest.importorskip("ray")
    tree, _, _ = fake_release
    one, other = tmp_path / "local.jsonl.gz", tmp_path / "ray.jsonl.gz"
    assert cli.main([str(tree), "--rules", "vllm_0_33_0", "--out", str(one), "--jobs", "1", *FILTERS]) == 0
    assert cli.main([str(tree), "--rules", "vllm_0_33_0", "--out", str(other), "--ray-address", "local",
                     "--batch-size", "3", *FILTERS]) == 0
    assert other.read_bytes() == one.read_bytes()
