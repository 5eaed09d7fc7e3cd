"""The evidence a resolution reads, as one explicit value: what hardware said about each capability claim
(`<conf>/conformance/<gpu_model>.yaml`, conformance_data.py) and how fast each kernel ran
(`<conf>/perf/<gpu_model>.yaml`, perf_data.py).

The caller loads it once from the conf directory it composed the config from and passes it to resolution
(`select(cfg, evidence)`), so a selection is a function of (config, evidence): the two sides of a diff each
read their own conf tree's data, and a test hands in its own. Each GPU model's files are read on first use,
once per Evidence (a matrix over several platforms reads only the GPUs it names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config.compose import CONF_DIR
from . import conformance_data, perf_data
from .conformance_data import ConformanceFile
from .perf_data import PerfFile


@dataclass(frozen=True, eq=False)
class Evidence:
    """conformance_dir / perf_dir: where `<gpu_model>.yaml` files are read (None: none there, so every claim is
    unverified and nothing is measured)."""

    conformance_dir: Path | None = None
    perf_dir: Path | None = None
    _read: dict = field(default_factory=dict, repr=False, compare=False)  # (kind, gpu) -> file or None, read once

    @classmethod
    def load(cls, conf_dir: Path | str = CONF_DIR) -> Evidence:
        """The evidence of a conf tree: its conformance/ and perf/ folders."""
        conf_dir = Path(conf_dir)
        return cls(conf_dir / "conformance", conf_dir / "perf")

    @classmethod
    def none(cls) -> Evidence:
        """No measurements at all (vLLM's own view: it reads no conformance or perf data)."""
        return cls()

    def conformance(self, gpu_model: str | None) -> ConformanceFile | None:
        """The conformance file of a GPU model, None where there is none (or no GPU model is named)."""
        return self._get("conformance", gpu_model)

    def perf(self, gpu_model: str | None) -> PerfFile | None:
        """The measured kernel times of a GPU model, None where there are none."""
        return self._get("perf", gpu_model)

    def _get(self, kind: str, gpu_model: str | None):
        directory = self.conformance_dir if kind == "conformance" else self.perf_dir
        if not gpu_model or directory is None:
            return None
        key = (kind, gpu_model)
        if key not in self._read:
            loader = conformance_data.load if kind == "conformance" else perf_data.load
            self._read[key] = loader(gpu_model, directory)
        return self._read[key]
