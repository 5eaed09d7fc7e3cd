"""The selector's public entry: compose a config, then select under explicit evidence.

    cfg = compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"])
    sel = resolve(cfg)                                # under the bundled conf tree's evidence
    sel = resolve(cfg, Evidence.load(other_conf_dir))  # under another tree's conformance and perf data
    sel = select(["platform=sm90"], conf_dir)         # compose from conf_dir, select under its evidence

A selection is a function of (config, evidence): the evidence (selector/evidence/evidence.py) holds what
hardware verified (conf/conformance/) and measured (conf/perf/), loaded by the caller from the conf tree the
config was composed from. The layers below: base, config, outputs, evidence, rules, measure, export, review,
commands (tests/test_layers.py keeps their order).
"""

from __future__ import annotations

import functools
from pathlib import Path

from .config.compose import CONF_DIR, compose, compose_raw, validate
from .config.schema import KSelectConfig
from .evidence.evidence import Evidence
from .measure.select import select as select_config
from .outputs.selection import Selection
from .rules.rulebook import RuleBook

__all__ = ["CONF_DIR", "Evidence", "bundled_evidence", "compose", "compose_raw", "validate", "resolve", "select"]


@functools.lru_cache(maxsize=1)
def bundled_evidence() -> Evidence:
    """The evidence of the bundled conf tree (CONF_DIR), one value per process."""
    return Evidence.load(CONF_DIR)


def resolve(cfg: KSelectConfig, evidence: Evidence | None = None, book: RuleBook | None = None) -> Selection:
    """cfg's selection under `evidence` (None: the bundled conf tree's, bundled_evidence())."""
    return select_config(cfg, bundled_evidence() if evidence is None else evidence, book)


def select(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | str = CONF_DIR) -> Selection:
    """Compose from conf_dir and select under that conf tree's evidence."""
    cfg = compose(overrides, conf_dir)
    same = Path(conf_dir).resolve() == CONF_DIR.resolve()
    return select_config(cfg, bundled_evidence() if same else Evidence.load(conf_dir))
