"""The Triton kernel source TRITON_ATTN runs (kernels/vllm_triton.py) is the release the default rules model."""

import json
import re
from pathlib import Path

from kselect.kernels import vllm_triton
from kselect.selector.base.files import load_yaml
from kselect.selector.config.compose import CONF_DIR
from kselect.selector.config.releases import default_rules

ROOT = Path(__file__).resolve().parents[2]


def default_release() -> str:
    """conf/config.yaml's default rules option -> the vLLM version its manifest ships (kernel_versions)."""
    data = load_yaml(CONF_DIR / "rules" / f"{default_rules(CONF_DIR)}.yaml", "a rules file")
    return data["kernel_versions"]["vllm_flash_attn"].removeprefix("vllm-")


def test_default_kernel_source_is_the_default_release():
    rel = default_release()
    assert vllm_triton.DEFAULT_RELEASE == rel
    pins = json.loads((ROOT / "kernels" / "vllm_triton_sources.json").read_text())["releases"]
    assert set(pins[rel]["files"]) == set(vllm_triton.FILES) and len(pins[rel]["wheel_sha256"]) == 64


def test_ci_fetches_the_default_release():
    fetched = re.findall(r"vllm_triton_fetch --release (\S+)", (ROOT / ".ci" / "run").read_text())
    assert fetched == [default_release()]
