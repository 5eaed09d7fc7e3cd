"""`kselect select` composes once, and what it composed is kept in the user cache under the content of every
conf file, the overrides and kselect's code (selector/base/cache.py, selector/config/compose.py): a changed
file, a new kselect version or a corrupt entry composes again; the conf-file check runs on every content."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hydra._internal.hydra import Hydra

from kselect.selector.api import CONF_DIR, select
from kselect.selector.base import cache
from kselect.selector.base.cli_errors import call_main
from kselect.selector.config.guard import ConfTreeError

from kselect_inprocess import kselect_main

ARGS = ["platform=sm90", "model=llama3_1_8b"]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "kselect"


@pytest.fixture
def composes(monkeypatch):
    """The number of times Hydra composed a config (its app's run and its compose API both go through here)."""
    calls = []
    plain = Hydra.compose_config

    def counted(self, *a, **k):
        calls.append(k.get("overrides", a[1] if len(a) > 1 else None))
        return plain(self, *a, **k)

    monkeypatch.setattr(Hydra, "compose_config", counted)
    return calls


@pytest.fixture
def conf(tmp_path):
    out = tmp_path / "conf"
    shutil.copytree(CONF_DIR, out)
    return out


def _select(capsys, argv=ARGS) -> str:
    assert call_main(kselect_main("select"), list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_select_composes_once_then_not_at_all(fresh_cache, composes, capsys):
    first = _select(capsys)
    assert len(composes) == 1
    assert _select(capsys) == first and len(composes) == 1  # the second call composes nothing
    assert "FLASH_ATTN" in first and list((fresh_cache / "compose").glob("*.json"))


def test_the_hydra_app_path_gives_the_same_answer(fresh_cache, capsys):
    """A flag takes Hydra's own app (`--run` is its default mode): the same text as the plain path."""
    plain = _select(capsys)
    assert _select(capsys, ["--run", *ARGS]) == plain


def test_explain_composes_once_without_the_hydra_app_and_answers_as_it(fresh_cache, composes, capsys):
    """`kselect explain <overrides>` takes the plain path too (kselect/commands/plain.py): one compose, then none;
    a flag takes Hydra's app, with the same answer."""
    argv = ["platform=h100", "model=gemma4_e4b", "kv_cache=fp8"]
    assert call_main(kselect_main("explain"), argv) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    assert len(composes) == 1 and "Is an FP8 KV cache faster" in first
    assert call_main(kselect_main("explain"), argv) == 0 and capsys.readouterr().out == first and len(composes) == 1
    assert call_main(kselect_main("explain"), ["--run", *argv]) == 0 and capsys.readouterr().out == first


def test_claims_with_plain_overrides_never_starts_hydras_app(fresh_cache, capsys, monkeypatch):
    """`kselect claims <overrides>` answers on the plain path (its overrides checked by one compose): the same claims
    as through Hydra's app, which a flag still takes."""
    from kselect.selector.base import hydra_app

    argv = ["platform=sm90"]
    assert call_main(kselect_main("claims"), ["--run", *argv]) == 0, capsys.readouterr().err
    via_app = capsys.readouterr().out
    monkeypatch.setattr(hydra_app, "run_app", lambda *a, **k: (_ for _ in ()).throw(AssertionError("Hydra's app ran")))
    assert call_main(kselect_main("claims"), argv) == 0, capsys.readouterr().err
    assert capsys.readouterr().out == via_app and "FLASH_ATTN" in via_app


def test_a_changed_rule_file_changes_the_next_answer(fresh_cache, conf):
    """Same size, same mtime, other content: the cache keys on content."""
    first = select(ARGS, conf)
    assert first.groups[0].backend == "FLASH_ATTN"
    path = conf / "rules" / "vllm_0_32_0.yaml"
    text, st = path.read_text(), path.stat()
    old = "priority: [FLASH_ATTN, FLASHINFER, TRITON_ATTN"
    assert old in text
    path.write_text(text.replace(old, "priority: [FLASHINFER, FLASH_ATTN, TRITON_ATTN", 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    assert select(ARGS, conf).groups[0].backend == "FLASHINFER"
    path.write_text(text)
    assert select(ARGS, conf).groups[0].backend == "FLASH_ATTN"


def test_a_new_kselect_version_composes_again(fresh_cache, composes, monkeypatch):
    select(ARGS)
    select(ARGS)
    assert len(composes) == 1
    monkeypatch.setattr(cache, "_versions_key", lambda: "kselect=99.0")
    select(ARGS)
    assert len(composes) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other key", "altered body"])
def test_a_corrupt_entry_is_rebuilt_never_trusted(fresh_cache, composes, damage):
    want = select(ARGS)
    [entry] = (fresh_cache / "compose").glob("*.json")
    raw = entry.read_bytes()
    head, _, body = raw.partition(b"\n")
    meta = json.loads(head)
    assert b'"FLASH_ATTN"' in body
    entry.write_bytes({
        "garbage": b"\x00not json",
        "truncated": raw[: len(raw) // 2],
        "other key": json.dumps({**meta, "key": "0" * 64}).encode() + b"\n" + body,
        # a valid config, but not the one composed: its hash no longer matches the header
        "altered body": head + b"\n" + body.replace(b'"FLASH_ATTN"', b'"FLASHINFER"', 1),
    }[damage])
    assert select(ARGS) == want
    assert len(composes) == 2  # composed again
    assert entry.read_bytes() == raw  # and rewritten
    assert select(ARGS) == want and len(composes) == 2


def test_the_conf_file_check_runs_on_every_content(fresh_cache, conf):
    """A file that passed is not passed again once it changes, cache warm or not."""
    select(ARGS, conf)
    path = conf / "overlay" / "pr48666.yaml"
    path.write_text(path.read_text() + "\nbad:\n  _target_: os.system\n")
    with pytest.raises(ConfTreeError, match="_target_"):
        select(ARGS, conf)


def test_cache_off_and_unwritable_still_answer(fresh_cache, composes, monkeypatch):
    want = select(ARGS)
    monkeypatch.setenv("KSELECT_CACHE", "0")
    assert select(ARGS) == want and len(composes) == 2
    monkeypatch.delenv("KSELECT_CACHE")
    shutil.rmtree(fresh_cache)
    fresh_cache.parent.mkdir(exist_ok=True)
    fresh_cache.write_text("a file where the cache folder would be")
    assert select(ARGS) == want and len(composes) == 3


def test_parsed_data_files_equal_their_yaml(fresh_cache):
    from kselect.selector.base.files import load_yaml

    for path in [CONF_DIR / "perf" / "nvidia_h200.yaml", CONF_DIR / "conformance" / "nvidia_h200.yaml"]:
        want = load_yaml(path)
        assert cache.load_yaml_cached(path) == want  # parsed, stored
        assert cache.load_yaml_cached(path) == want  # read back
