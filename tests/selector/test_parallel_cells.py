"""selector/review/parallel.py: searched cells of a large matrix resolved in forked workers give what one process
gives, in matrix order; an error other than a refused selection is raised as one process raises it."""

from __future__ import annotations

import pytest

from kselect.selector.base.errors import ConfigError, KSelectError
from kselect.selector.config.compose import CONF_DIR
from kselect.selector.review import parallel
from kselect.selector.review.cells import expand
from kselect.selector.review.configs import Builder
from kselect.selector.review.matrix import load_matrix, resolve_cells


def _cells():
    return expand(load_matrix("h200_objective"))[:12]


def _resolve(monkeypatch, jobs: str):
    monkeypatch.setenv("KSELECT_JOBS", jobs)
    return resolve_cells(_cells(), builder=Builder(CONF_DIR, ["objective=latency"]))


def test_workers_answer_as_one_process(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_CELLS", 4)
    monkeypatch.setattr(parallel, "RUN", 5)  # three runs, the last one short
    one = _resolve(monkeypatch, "1")
    many = _resolve(monkeypatch, "2")
    assert [r.cell.id for r in many] == [r.cell.id for r in one]
    assert [r.selection for r in many] == [r.selection for r in one]
    assert [(r.failure, r.rejected) for r in many] == [(r.failure, r.rejected) for r in one]
    assert any(r.selection is not None and r.selection.groups[0].measured for r in many)  # the search ran


def test_a_worker_error_is_raised_here(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_CELLS", 4)
    monkeypatch.setenv("KSELECT_JOBS", "2")
    real = parallel.select

    def failing(cfg, evidence):
        if cfg.platform.name == "sm90":
            raise ConfigError("platform", "sm90", ["not in this test"])
        return real(cfg, evidence)

    monkeypatch.setattr(parallel, "select", failing)
    with pytest.raises(ConfigError, match="platform: bad value 'sm90'"):
        resolve_cells(_cells(), builder=Builder(CONF_DIR, ["objective=latency"]))


@pytest.mark.parametrize("bad", ["0", "two", "-1", "1000"])
def test_bad_jobs_setting_names_it(monkeypatch, bad):
    monkeypatch.setenv("KSELECT_JOBS", bad)
    with pytest.raises(KSelectError, match=f"KSELECT_JOBS='{bad}'.*1 to 256"):
        parallel.jobs()
