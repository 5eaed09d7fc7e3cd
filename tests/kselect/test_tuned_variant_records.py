"""kselect/measurement/gemv_variants.py's tuned variants read the fastest config per shape from sweep records
(kselect.measurement.kernels.gemv's JSON): several records joined by os.pathsep, later ones winning; none set, refused."""

import json
import os

import pytest

from kselect.measurement.gemv_variants import _best_of


def _record(path, rows):
    path.write_text(json.dumps(dict(device="C", rows=[dict(n=n, k=k, rows=m, triton=dict(cfg=cfg)) for n, k, m, cfg in rows])))
    return str(path)


def test_later_records_win_and_other_rows_are_left_out(tmp_path, monkeypatch):
    a = _record(tmp_path / "a.json", [(2560, 10240, 16, {"split_k": 4}), (3072, 2560, 16, {"block_n": 32}),
                                      (3072, 2560, 1, {"block_n": 8})])
    b = _record(tmp_path / "b.json", [(2560, 10240, 16, {"split_k": 1})])
    monkeypatch.setenv("KSELECT_SKINNY_TABLE", os.pathsep.join([a, b]))
    best = _best_of("KSELECT_SKINNY_TABLE", 16)
    assert best(2560, 10240) == {"split_k": 1} and best(3072, 2560) == {"block_n": 32} and best(1, 1) is None


def test_no_record_is_refused(monkeypatch):
    monkeypatch.delenv("KSELECT_SKINNY_TABLE", raising=False)
    with pytest.raises(ValueError, match="set KSELECT_SKINNY_TABLE"):
        _best_of("KSELECT_SKINNY_TABLE", 16)

