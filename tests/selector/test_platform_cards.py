"""Per-card evidence (#52): a GPU-name platform reads the files of the card it names, the key a device gives itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kselect.selector.api import compose, select
from kselect.selector.config.detect import gpu_model_key

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize(("platform", "device_name"), [("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200")])
def test_a_cards_preset_names_the_key_its_device_gives_itself(platform, device_name):
    key = compose([f"platform={platform}"]).platform.gpu_model
    assert key == gpu_model_key(device_name)  # platform=auto on that card finds the same files
    assert (CONF / "conformance" / f"{key}.yaml").is_file() and (CONF / "perf" / f"{key}.yaml").is_file()


def test_h100_claims_are_marked_from_the_h100_file_not_the_h200s():
    measured = {card: yaml.safe_load((CONF / "conformance" / f"{card}.yaml").read_text())["claims"]
                for card in ("nvidia_h100_80gb_hbm3", "nvidia_h200")}
    for platform, card in (("h100", "nvidia_h100_80gb_hbm3"), ("h200", "nvidia_h200")):
        sel = select([f"platform={platform}", "model=gemma4_e4b", "kv_cache=fp8"])
        claims = [c for g in sel.groups for c in g.claims]
        assert claims and all(c.rel_err == measured[card][c.claim]["rel_err"] for c in claims), (platform, claims)
        files = {w.data for w in sel.warnings if w.code == "kernel_data_version"}
        assert all(card in f for f in files), files
    assert any(measured["nvidia_h100_80gb_hbm3"][c]["rel_err"] != measured["nvidia_h200"].get(c, {}).get("rel_err")
               for c in measured["nvidia_h100_80gb_hbm3"])  # the two cards' figures differ, so the check can fail
