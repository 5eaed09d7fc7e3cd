"""The one-line FlashInfer JIT notice and the silenced CuTe-DSL aux_data warning (CPU: no kernels run)."""

from __future__ import annotations

import warnings

import torch

from kselect.kernels.flash_attn_loader import quiet_cute_aux_data
from kselect.kernels.flashinfer import announce_jit


def test_flashinfer_jit_notice_is_one_line_naming_the_cache(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path))
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    announce_jit((torch.bfloat16, torch.float8_e4m3fn, torch.bfloat16, 512, False))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bfloat16 q / float8_e4m3fn KV, head 512" in err
    assert str(tmp_path / ".cache" / "flashinfer") in err and "FLASHINFER_CUDA_ARCH_LIST=9.0a" in err


def test_only_the_aux_data_warning_is_silenced():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_cute_aux_data()
        warnings.warn("Argument aux_data (position 18) cannot be converted to a JitArgument for function 'f'", UserWarning)
        warnings.warn("Argument other (position 1) cannot be converted to a JitArgument", UserWarning)
    assert [str(w.message) for w in seen] == ["Argument other (position 1) cannot be converted to a JitArgument"]
