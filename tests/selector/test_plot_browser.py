"""The diff picture's HTML page in a real headless browser (Chromium): it renders, the inline PNG
and the backend chips are on screen. Skips where Chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from kselect.commands.plot import main

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (apt-get install chromium)")
def test_diff_page_renders_in_headless_chromium(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    out = tmp_path / "pr48666"
    assert main(["b.overlay=[pr48666]", "matrix=seed_smoke", f"out={out}"]) == 0
    shot = tmp_path / "shot.png"
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--hide-scrollbars", "--window-size=1400,1000", f"--screenshot={shot}", out.with_suffix(".html").as_uri()]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[:2] == (1000, 1400)
    assert img.std() > 0.05  # not a blank page

    def seen(hex_color: str) -> int:
        return int((np.abs(img - _rgb(hex_color)).max(-1) < 0.03).sum())

    # FLASH_ATTN v4 and FLASHINFER chips (framed, full color) from the legend, the table and the PNG
    assert seen("#6baed6") > 500 and seen("#2ca02c") > 500
