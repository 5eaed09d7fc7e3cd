"""The selector's public entry: compose a config, then select under explicit evidence.

    cfg = compose(["platform=sm90", "model=gemma4_31b", "kv_cache=fp8"])
    sel = resolve(cfg)                                # under the bundled conf tree's evidence
    sel = resolve(cfg, Evidence.load(other_conf_dir))  # under another tree's conformance and perf data
    sel = select(["platform=sm90"], conf_dir)         # compose from conf_dir, select under its evidence
    answers = select_many([["platform=sm90", "model=llama3_1_8b"], ...])   # many in this process, in order

compose() keeps what it composed in the user cache ($XDG_CACHE_HOME/kselect, selector/base/cache.py) under the
content of every conf file, the overrides and kselect's code: the same question composes once.

A selection is a function of (config, evidence): the evidence (selector/evidence/evidence.py) holds what
hardware verified (conf/conformance/) and measured (conf/perf/), loaded by the caller from the conf tree the
config was composed from. The layers below: base, config, outputs, evidence, rules, measure, export, review,
commands (tests/test_layers.py keeps their order).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

from .config.compose import CONF_DIR, compose, compose_raw, validate
from .config.schema import KSelectConfig
from .evidence.evidence import Evidence
from .measure.select import select as select_config
from .outputs.selection import Selection
from .review.bulk import Answer, answer_all
from .review.configs import Builder
from .rules.rulebook import RuleBook

__all__ = ["CONF_DIR", "Answer", "Builder", "Evidence", "bundled_evidence", "compose", "compose_raw", "validate",
           "resolve", "select", "select_many"]


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


def select_many(requests: Iterable[Sequence[str]], conf_dir: Path | str = CONF_DIR) -> list[Answer]:
    """Each request's answer (its config and selection, or the error `kselect select` exits 2 with), in order,
    under the conf tree's evidence: matrix-shaped requests share one compose per overlay set
    (selector/review/bulk.py). `Answer.record()` is the JSON line `kselect select cells=` prints."""
    same = Path(conf_dir).resolve() == CONF_DIR.resolve()
    return answer_all(requests, conf_dir, bundled_evidence() if same else Evidence.load(conf_dir))
