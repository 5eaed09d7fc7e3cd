"""`kselect plot`: a self-contained HTML page and a PNG of the matrix / of a diff."""

from __future__ import annotations

import re
import struct

import pytest

from kselect.selector.base.errors import KSelectError
from kselect.commands.plot import main


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_diff_grid_picture(tmp_path, capsys):
    out = tmp_path / "pr48666"
    assert main(["b.overlay=[pr48666]", "style=grid", "matrix=seed_smoke", f"out={out}"]) == 0
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
    assert main(["matrix=golden", "where.platform=sm100", "where.kv_cache=fp8", "where.model=gemma4_31b", f"out={out}"]) == 0
    page = out.with_suffix(".html").read_text()
    # the MTP unit-scales warning and the cells relying on unverified claims are on the page
    assert "mtp-unit_scales_on_calibrated_fp8" in page
    assert "rely on hardware claims not yet verified" in page
    assert "class='mk'>!</div>" in page
    _png_size(out.with_suffix(".png").read_bytes())


def test_bad_arguments():
    with pytest.raises(KSelectError, match="old spelling; write a.overlay"):
        main(["a=[]"])
    with pytest.raises(KSelectError, match="matches none of the axis values"):
        main(["where.platform=sm91"])


def test_diff_blocks_picture_is_the_diff(tmp_path, capsys):
    """style=blocks (the default for a diff): one row per block of `kselect diff`, before -> after."""
    from kselect.selector.review.diff import diff_overlays

    out = tmp_path / "blocks"
    assert main(["b.overlay=[pr48666]", "matrix=seed_smoke", f"out={out}"]) == 0
    d = diff_overlays((), ("pr48666",), "seed_smoke")
    assert f"{len(d.blocks)} blocks" in capsys.readouterr().out
    page = out.with_suffix(".html").read_text()
    assert page.count("<tr") == len(d.blocks) + 1  # a header and one row per block
    assert re.findall(r"src=['\"]([a-z]+):", page) == ["data"] and "http" not in page
    # the multimodal FP8 cells: both groups TRITON_ATTN -> FLASH_ATTN v4, framed, with an arrow
    row = next(r for r in page.split("<tr")[1:] if "spec=none × multimodal=true" in r and "quant_query" in r)
    assert row.count("class='chip ch'") == 4 and row.count("<b>→</b>") == 2 and "TRITON_ATTN" in row
    w, h = _png_size(out.with_suffix(".png").read_bytes())
    assert 1000 < w < 2000 and h < 1000


@pytest.mark.slow
def test_diff_picture_of_the_default_matrix_opens_comfortably(tmp_path, capsys):
    out = tmp_path / "default"
    assert main(["b.overlay=[pr48666]", "matrix=seed", f"out={out}"]) == 0  # the seed story: its matrix
    assert "5376 cells: " in capsys.readouterr().out
    assert out.with_suffix(".html").stat().st_size < 1_000_000 and out.with_suffix(".png").stat().st_size < 500_000
    w, h = _png_size(out.with_suffix(".png").read_bytes())
    assert w <= 1500 and h <= 2500


def test_an_existing_picture_is_replaced_only_when_asked(tmp_path, capsys):
    """#51: `kselect plot` overwrote kselect-matrix.png in the current folder without a word."""
    out = tmp_path / "m"
    out.with_suffix(".png").write_bytes(b"earlier")
    with pytest.raises(KSelectError, match=r"m\.png exists; allowed: another out= path, or overwrite=true"):
        main(["matrix=smoke", "where.platform=cpu", f"out={out}"])
    assert out.with_suffix(".png").read_bytes() == b"earlier" and not out.with_suffix(".html").exists()
    assert main(["matrix=smoke", "where.platform=cpu", f"out={out}", "overwrite=true"]) == 0
    assert out.with_suffix(".png").read_bytes() != b"earlier" and "wrote " in capsys.readouterr().out


def test_a_first_picture_prints_only_its_own_line(tmp_path):
    # before: on a machine without matplotlib's font cache, Hydra's logging printed
    # `[...][HYDRA] generated new fontManager` with the command's output
    import os
    import subprocess
    import sys

    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}  # no font cache yet: matplotlib builds one
    r = subprocess.run([sys.executable, "-m", "kselect", "plot", f"out={tmp_path / 'p'}"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "mpl").is_dir()  # the cache was built in this run
    assert r.stdout.splitlines() == [f"wrote {tmp_path / 'p.png'} and {tmp_path / 'p.html'} (48 cells, 0 invalid)"]
    assert "HYDRA" not in r.stderr and "fontManager" not in r.stderr, r.stderr
