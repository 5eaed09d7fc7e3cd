"""Over the committed H200 data (conf/perf/nvidia_h200.yaml, conf/conformance/nvidia_h200.yaml): every objective
choice exported with output=vllm runs only kernels vLLM ships. Where the objective's best decodes on one of kselect's
builds (TRITON_ATTN+kselect, FLASH_ATTN v3+upstream), the command runs the best choice made of vLLM's own kernels
and says what the build measured and what the command loses."""

from __future__ import annotations

import re

import pytest

from kselect.selector.api import compose, resolve
from kselect.selector.export.formats import render
from kselect.selector.export.vllm_export import vllm_kernels
from kselect.selector.config.vocab import ALT_BUILDS

UPSTREAM = ("platform.packages.fa3_upstream=true",)  # flash-attention's FA3 build installed: a second build to choose
CELLS = [("gemma4_e4b", "fp8", "latency", ()), ("gemma4_e4b", "fp8", "throughput", ()),
         ("gemma4_31b", "auto", "latency", ()), ("gemma4_31b", "fp8", "latency", UPSTREAM),
         ("gemma4_e4b", "auto", "latency", UPSTREAM)]


def _exported_backends(text: str) -> set[str]:
    """The backends the command's --attention-config names."""
    m = re.search(r"--attention-config '([^']*)'", text)
    return set(re.findall(r'"([A-Z][A-Z0-9_]+)"', m.group(1))) if m else set()


@pytest.mark.parametrize("model,kv,objective,pins", CELLS)
def test_exported_objective_choice_runs_only_vllm_kernels(model, kv, objective, pins):
    cfg = compose(["rules=vllm_0_33_0", "platform=sm90", f"model={model}", f"kv_cache={kv}", f"objective={objective}",
                   *pins])
    sel = resolve(cfg)
    text = render(sel, "vllm", cfg=cfg)
    ran = vllm_kernels(sel)
    assert text.startswith("vllm serve ")
    assert all(g.build is None and "+" not in g.label for g in ran.groups), [g.label for g in ran.groups]
    builds = [g for g in sel.groups if g.build and not g.draft]
    assert _exported_backends(text) <= {g.backend for g in ran.groups}
    if builds:
        assert ran is not sel and all(g.build in ALT_BUILDS[(g.backend, g.flash_attn_version)] for g in builds)
        assert "the command above runs the best choice made of vLLM's own kernels" in text
        for g in builds:
            assert f"{g.kind} runs {g.label}, a build vLLM does not ship" in text
        assert sel.request_ms and ran.request_ms >= sel.request_ms * (1 - 1e-9)  # the objective's best is the best
    else:
        assert ran is sel


def test_the_committed_data_does_pick_a_build_somewhere():
    """The cells above exercise the substitution: with the H200 figures, kselect's Triton kernel decodes E4B's full
    layers fastest (bf16 and FP8), so the objective picks TRITON_ATTN+kselect there."""
    cfg = compose(["rules=vllm_0_33_0", "platform=sm90", "model=gemma4_e4b", "objective=latency"])
    sel = resolve(cfg)
    assert [g.label for g in sel.groups if g.build] == ["TRITON_ATTN+kselect"]
    assert all(g.build is None for g in vllm_kernels(sel).groups)
