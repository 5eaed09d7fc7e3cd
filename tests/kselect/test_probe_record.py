"""kselect/measurement/probes/record.py, the recording probes' shared ending, on CPU with a stand-in device name: the
rows, environment and extras written atomically as <name>.json and <name>.md; nothing written when the measurement
fails (attn_floor's wrong result exits 1)."""

import importlib
import json

import pytest

from kselect.measurement.probes import attn_floor, record as R

# the module (the package's `environment` attribute is the function of the same name)
environment_mod = importlib.import_module("kselect.measurement.e2e.environment")


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(R.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(R.torch.cuda, "get_device_name", lambda *a: "Stand-in GPU")
    # the environment reads the device's properties: its own tests cover it; here only what record adds to it
    monkeypatch.setattr(environment_mod, "environment", lambda argv, script: dict(command=f"python3 {script} {argv}"))


def test_a_probe_writes_its_rows_environment_and_extras(tmp_path, fake_cuda, capsys):
    out = tmp_path / "out dir"
    rows = [dict(programs=1, us=1.5)]
    assert R.record("sync_floor", ["--out", str(out)], out, lambda: rows, lambda r, env: f"| {env['gpu']} |\n",
                    steps=(8, 64)) == 0
    data = json.loads((out / "sync_floor.json").read_text())
    assert data["rows"] == rows and data["steps"] == [8, 64] and data["env"]["gpu"] == "Stand-in GPU"
    assert "--out" in data["env"]["command"] and (out / "sync_floor.md").read_text() == "| Stand-in GPU |\n"
    assert "| Stand-in GPU |" in capsys.readouterr().out


def test_a_wrong_attention_result_exits_1_and_writes_nothing(tmp_path, fake_cuda, monkeypatch, capsys):
    def wrong(*a):
        raise attn_floor.WrongResult("attn_floor: the sliding call differs")

    monkeypatch.setattr(attn_floor, "measure", wrong)
    out = tmp_path / "A"
    assert attn_floor.main(["--out", str(out)]) == 1
    assert "sliding call differs" in capsys.readouterr().err and not out.exists()


def test_a_step_costs_the_slope_between_two_chain_lengths():
    """A chain of n steps taking 5 + 2n us: 2 us a step, whatever the fixed 5 (launch, the first step's ramp)."""
    asked = []
    got = R.slope(lambda n: asked.append(n) or 5.0 + 2.0 * n, (8, 64), "us_step")
    assert got == {"us_step": 2.0, "us_lo": 21.0, "us_hi": 133.0} and asked == [8, 64]
