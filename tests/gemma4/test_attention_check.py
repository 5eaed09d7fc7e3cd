"""The numerics check compares each attention call of the selected backend with TORCH_REFERENCE on
the same inputs (gemma4/attention_check.py): a correct kernel passes its own bar, a kernel that is
slightly off or returns NaN (as the refuted FA4 FP8 path of pr48666 does on the H200) fails, and a
reference-only selection is reported as not compared."""

from __future__ import annotations

import math

import pytest
import torch

from kselect.backends.reference import TorchReferenceBackend
from kselect.gemma4 import attention_check
from kselect.gemma4.engine import model_groups
from g4_helpers import simple_selection  # noqa: E402 - tests/gemma4 is on sys.path (conftest)
from kselect.gemma4.checkpoint import build_random
from kselect.gemma4.config import Gemma4Args


class Perturbed(TorchReferenceBackend):
    """Stands in for a selected kernel: the reference's output, scaled (or NaN) on chosen calls."""

    scale = 1.0

    def forward(self, q, k_cache, v_cache, meta, layer):
        out = super().forward(q, k_cache, v_cache, meta, layer)
        return out * self.scale


@pytest.fixture(scope="module")
def model():
    args = Gemma4Args(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, global_head_dim=64, layer_types=["sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention"], sliding_window=8,
                      max_position_embeddings=128)  # fmt: skip
    return build_random(args, seed=0).eval()


def run_check(model, monkeypatch, scale: float | None, backend: str = "TRITON_ATTN"):
    groups = model_groups(simple_selection(model.args, backend=backend))
    real = attention_check.make_backend

    def fake(g):  # the "selected" backend is the perturbed reference; the reference stays real
        if g.backend == "TORCH_REFERENCE" or scale is None:
            return real(g)
        b = Perturbed(g)
        b.scale = scale
        return b

    monkeypatch.setattr(attention_check, "make_backend", fake)
    prompts = [[2, 5, 9, 11, 40, 41, 42, 7, 8, 9, 10, 3], [2, 17, 19, 23]]
    forced = [[4, 5, 6], [7, 8, 9]]
    return attention_check.check_attention(model, groups, prompts, forced, max_len=24)


def test_a_correct_kernel_passes_every_call(model, monkeypatch):
    checks = run_check(model, monkeypatch, 1.0)
    assert [c.group for c in checks] == ["sliding_attention", "full_attention"]
    for c in checks:
        assert c.checked and c.ok and c.worst == 0.0 and c.tolerance == 1e-4  # fp32 model: the fp32 bar
        assert c.calls == 3 * len(model.args.layers_of(c.group))  # 3 forwards (prefill, 2 decodes), every layer
    assert "TRITON_ATTN vs TORCH_REFERENCE on the same inputs" in checks[0].line() and checks[0].line().endswith(": ok")


def test_a_kernel_off_by_its_bar_fails(model, monkeypatch):
    checks = run_check(model, monkeypatch, 1.001)  # 1e-3 relative: ten times the fp32 bar
    assert all(not c.ok and math.isclose(c.worst, 1e-3, rel_tol=1e-2) for c in checks)
    assert "FAILED (> 0.0001)" in checks[0].line()


def test_non_finite_output_fails(model, monkeypatch):
    checks = run_check(model, monkeypatch, math.nan)
    assert all(not c.ok and math.isnan(c.worst) for c in checks)
    assert "FAILED: non-finite output" in checks[1].line()


def test_the_reference_is_not_compared_with_itself(model, monkeypatch):
    checks = run_check(model, monkeypatch, None, backend="TORCH_REFERENCE")
    assert all(not c.checked and c.ok and c.calls == 0 for c in checks)
    assert checks[0].line() == "sliding_attention: TORCH_REFERENCE is the reference itself; not compared"


def test_gpu_main_job_runs_the_tiny_model_in_bf16():
    """On CUDA the default main job would otherwise select Triton for an fp32 model and never touch
    FA3/FA4/FlashInfer; the switch is printed and a named model.dtype wins."""
    from kselect.run import gpu_tiny_in_bf16
    from kselect.selector.api import compose

    sm90 = compose(["platform=sm90"])
    assert gpu_tiny_in_bf16(sm90, ["platform=sm90"])
    assert not gpu_tiny_in_bf16(compose(["platform=sm90", "model.dtype=float32"]), ["platform=sm90", "model.dtype=float32"])
    assert not gpu_tiny_in_bf16(compose(["platform=cpu"]), ["platform=cpu"])
    assert not gpu_tiny_in_bf16(compose(["platform=sm90", "model=gemma4_e4b"]), ["platform=sm90", "model=gemma4_e4b"])
