"""tests/conftest.py's Hydra parse memo: composes give what Hydra's own file loading gives, an edited conf file is
read afresh, and a file that does not parse fails at every compose."""

import os
import shutil

import pytest
import yaml

from kselect.selector.config.compose import CONF_DIR, _hydra_compose

if os.environ.get("KSELECT_TEST_HYDRA_REPARSE"):
    pytest.skip("the memo is switched off", allow_module_level=True)

OVERRIDES = [["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"], ["platform=sm100", "overlay=[pr48666]"],
             ["platform=sm90", "rules=vllm_0_32_0", "spec_decode=mtp"]]


def file_source():
    from hydra._internal.sources_registry import SourcesRegistry

    cls = SourcesRegistry.instance().resolve("file")
    assert getattr(cls.load_config, "kselect_memo", None) is not None, "tests/conftest.py's memo is not installed"
    return cls


def test_composes_equal_those_of_hydras_own_loading(monkeypatch):
    memoized = [_hydra_compose(o, CONF_DIR) for o in OVERRIDES]
    cls = file_source()
    assert cls.load_config.kselect_memo  # the composes went through it
    again = [_hydra_compose(o, CONF_DIR) for o in OVERRIDES]  # from the memo, after Hydra edited its copies
    monkeypatch.setattr(cls, "load_config", cls.load_config.original)
    assert memoized == again == [_hydra_compose(o, CONF_DIR) for o in OVERRIDES]


def test_an_edited_file_is_read_afresh_and_a_broken_one_fails_each_time(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf, ignore=shutil.ignore_patterns("perf"))
    preset = conf / "model" / "gemma4_31b.yaml"
    args = ["platform=sm90", "model=gemma4_31b"]
    assert _hydra_compose(args, conf)["model"]["head_dim"] == 256
    preset.write_text(preset.read_text().replace("head_dim: 256", "head_dim: 128"))
    assert _hydra_compose(args, conf)["model"]["head_dim"] == 128
    preset.write_text(preset.read_text() + "\n  bad: [\n")
    for _ in range(2):
        with pytest.raises(yaml.YAMLError, match="gemma4_31b.yaml"):
            _hydra_compose(args, conf)
