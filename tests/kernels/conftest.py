"""Make the repo root importable under plain `pytest` (rootdir-relative test modules)."""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
