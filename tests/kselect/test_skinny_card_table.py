"""kselect/measurement/kernels/gemv.py's card table: the shapes where the skinny GEMM beat cuBLAS by more than the band,
written per card into the table the kernel reads."""

import json

from kselect.measurement.kernels.gemv import card_table, write_table


def record(device="NVIDIA H200"):
    row = lambda n, cub, tri, rows=16: dict(n=n, k=256, rows=rows, cublas_ms=cub, triton=dict(ms=tri, cfg={"block_n": n}))  # noqa: E731
    return dict(device=device, rows=[row(16, 1.0, 0.9), row(32, 1.0, 0.99), row(64, 1.0, 1.1), row(128, 1.0, 0.5, rows=1)])


def test_only_shapes_faster_than_the_band_at_16_rows():
    assert card_table(record(), 0.02) == {"16x256": {"block_n": 16}}  # 1.11x in; 1.01x a tie; slower, one row: out
    assert card_table(record(), 0.0) == {"16x256": {"block_n": 16}, "32x256": {"block_n": 32}}


def test_each_card_written_beside_the_others(tmp_path):
    out = tmp_path / "t.json"
    for dev in ("A", "B"):
        (tmp_path / f"{dev}.json").write_text(json.dumps(record(dev)))
        write_table(tmp_path / f"{dev}.json", 0.02, out)
    t = json.loads(out.read_text())
    assert t["A"] == t["B"] == {"16x256": {"block_n": 16}} and set(t["_sources"]) == {"A", "B"}


def test_the_step_table_takes_every_16_row_shape_later_records_winning(tmp_path):
    from kselect.measurement.kernels.gemv import write_step_table

    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "step.json"
    a.write_text(json.dumps(record("C")))
    b.write_text(json.dumps(dict(device="C", rows=[dict(n=32, k=256, rows=16, triton=dict(ms=1, cfg={"split_k": 1}))])))
    out.write_text(json.dumps({"D": {"1x1": {}}, "_sources": {"D": "d"}}))
    write_step_table([a, b], "the step", out)
    t = json.loads(out.read_text())
    # slower than cuBLAS or not, every 16-row shape; the one-row shape out; b's config for 32x256; D kept
    assert t["C"] == {"16x256": {"block_n": 16}, "32x256": {"split_k": 1}, "64x256": {"block_n": 64}}
    assert t["D"] == {"1x1": {}} and t["_sources"] == {"D": "d", "C": "the step"}


def test_the_step_table_refuses_records_of_two_cards(tmp_path):
    import pytest

    from kselect.measurement.kernels.gemv import write_step_table

    paths = []
    for dev in ("A", "B"):
        paths.append(tmp_path / f"{dev}.json")
        paths[-1].write_text(json.dumps(record(dev)))
    with pytest.raises(ValueError, match="one card"):
        write_step_table(paths, "s", tmp_path / "o.json")
    assert not (tmp_path / "o.json").exists()
