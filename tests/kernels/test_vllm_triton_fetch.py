"""Where vLLM's Triton kernel source comes from (kernels/vllm_triton.py, kernels/vllm_triton_fetch.py): a missing
source or a wrong file is one clear message, never a traceback; a verified wheel fills the cache."""

import json
import zipfile

import pytest

from kselect.backends.base import BackendUnavailableError
from kselect.backends.fixtures import make_group
from kselect.backends.registry import make_backend
from kselect.kernels import vllm_triton as vt
from kselect.kernels import vllm_triton_fetch as fetch

pytest.importorskip("triton")
USER_SRC = vt.cache_root() / vt.DEFAULT_RELEASE  # the fetched files (CI fetches them first), before any test moves the cache


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KSELECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(vt.SRC_ENV, raising=False)
    monkeypatch.delenv(vt.RELEASE_ENV, raising=False)
    return tmp_path


def test_missing_source_names_the_fetch_command(empty_cache):
    with pytest.raises(BackendUnavailableError) as e:
        make_backend(make_group("TRITON_ATTN"))
    msg = str(e.value)
    assert "\n" not in msg and f"python -m kselect.kernels.vllm_triton_fetch --release {vt.DEFAULT_RELEASE}" in msg


def test_bad_release_and_bad_source(empty_cache, monkeypatch):
    monkeypatch.setenv(vt.RELEASE_ENV, "latest")
    with pytest.raises(BackendUnavailableError, match="KSELECT_VLLM_RELEASE='latest'"):
        make_backend(make_group("TRITON_ATTN"))
    monkeypatch.delenv(vt.RELEASE_ENV)
    monkeypatch.setenv(vt.SRC_ENV, str(empty_cache))
    with pytest.raises(BackendUnavailableError, match="holds no vllm/v1/attention/ops/triton_unified_attention.py"):
        make_backend(make_group("TRITON_ATTN"))


def _wheel(path, files: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_fetch_refuses_a_wheel_whose_files_differ(empty_cache, capsys):
    whl = _wheel(empty_cache / "vllm-0.33.0-x.whl", {f: b"# not vLLM's\n" for f in vt.FILES})
    assert fetch.main(["--release", "0.33.0", "--wheel", str(whl)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ from the sha256 pinned for vLLM 0.33.0" in err
    assert not (vt.cache_root() / "0.33.0").exists()


def test_fetch_refuses_unknown_release_and_missing_wheel(empty_cache, capsys):
    assert fetch.main(["--release", "9.9.9"]) == 2
    assert "pins the files of releases 0.32.0, 0.33.0, 0.34.0" in capsys.readouterr().err
    assert fetch.main(["--wheel", str(empty_cache / "nope.whl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_every_pinned_release_names_every_file():
    pins = json.loads(fetch.SOURCES.read_text())["releases"]
    assert pins and all(set(p["files"]) == set(vt.FILES) and len(p["wheel_sha256"]) == 64 for p in pins.values())


def test_fetch_from_a_verified_wheel_fills_the_cache(empty_cache, monkeypatch, capsys):
    """Needs the release's files once (CI fetched them): rebuilt into a wheel, they pass the pins and load."""
    src = USER_SRC
    if not all((src / f).is_file() for f in vt.FILES):
        pytest.skip(f"vLLM {vt.DEFAULT_RELEASE}'s files are not fetched here")
    monkeypatch.setenv("KSELECT_CACHE", str(empty_cache / "cache"))
    whl = _wheel(empty_cache / f"vllm-{vt.DEFAULT_RELEASE}-x.whl", {f: (src / f).read_bytes() for f in vt.FILES})
    assert fetch.main(["--release", vt.DEFAULT_RELEASE, "--wheel", str(whl)]) == 0
    dest = vt.cache_root() / vt.DEFAULT_RELEASE
    assert capsys.readouterr().out.strip() == str(dest) and not fetch.verified(dest, fetch.pins(vt.DEFAULT_RELEASE))
    assert vt.source_release(dest) == vt.DEFAULT_RELEASE
