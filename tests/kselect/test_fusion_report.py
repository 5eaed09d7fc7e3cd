"""kselect/measurement/gemma4/fusion_report.py: the profile table of fusion.md from fusion.json's fields."""

from kselect.measurement.gemma4.fusion_report import render
from kselect.measurement.step_profile import CATEGORIES


def data(profiles):
    return dict(environment=dict(command="c", git_commit="abc", gpu="G"), selection="s", ceilings=None, presets={},
                runs=[], fp8=[], profiles=profiles, greedy=[], prefill=[], hf=[], errors=[], skipped=[])


def test_the_profile_row_and_what_a_negative_idle_means():
    ms = dict.fromkeys(CATEGORIES, 0.0) | dict(gemm=3.469, attention=0.389)
    p = dict(preset="e4b", mode="triton", kernels_per_step=512.0, kernels_per_layer=12.19, copies_per_step=12.0,
             ms_per_step=ms, kernel_ms_per_step=4.234, graph_step_ms=3.904, idle_ms_per_step=-0.330)
    md = render(data([p]))
    assert "| e4b | triton | 512 | 12.2 | 12 | 3.469 | 0.389 |" in md and md.count("| -0.330 |") == 1
    assert "idle ms can be negative" in md
    assert "idle ms can be negative" not in render(data([]))  # no profile, no note
