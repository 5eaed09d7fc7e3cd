"""`kselect plot`: a self-contained HTML page and a PNG of the matrix / of a diff."""

from __future__ import annotations

import re
import struct

import pytest

from kselect.selector.errors import KSelectError
from kselect.selector.plot import main


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_diff_picture(tmp_path, capsys):
    out = tmp_path / "pr48666"
    assert main(["a=[]", "b=[pr48666]", f"out={out}"]) == 0
    assert "20 of 48 cells changed" in capsys.readouterr().out
    w, h = _png_size(out.with_suffix(".png").read_bytes())
    assert 600 < w < 3000 and 600 < h < 4000
    page = out.with_suffix(".html").read_text()
    # self-contained: the only src is the inline PNG, no links out
    assert re.findall(r"src=['\"]([a-z]+):", page) == ["data"] and "http" not in page
    assert "<h2>gemma4_31b</h2>" in page and "<h2>gemma4_tiny</h2>" in page
    assert "sm90-gemma4_31b-fp8-mm-pr48666: all groups: TRITON_ATTN -&gt; FLASH_ATTN v4" in page
    assert page.count("class='sc changed'") == 20
    assert "+warning" in page and "[conformance]" in page  # newly unverified FA4 claims are listed


def test_matrix_picture_with_filter_and_warnings(tmp_path):
    out = tmp_path / "golden"
    assert main(["matrix=golden", "where.platform=sm90", "where.kv_cache=fp8", "where.model=gemma4_31b", f"out={out}"]) == 0
    page = out.with_suffix(".html").read_text()
    # the MTP unit-scales warning and the cells relying on unverified claims are on the page
    assert "mtp-unit_scales_on_calibrated_fp8" in page
    assert "rely on hardware claims not yet verified" in page
    assert "class='mk'>!</div>" in page
    _png_size(out.with_suffix(".png").read_bytes())


def test_bad_arguments():
    with pytest.raises(KSelectError, match="a diff needs both"):
        main(["a=[]"])
    with pytest.raises(KSelectError, match="matches none"):
        main(["where.platform=sm91"])
