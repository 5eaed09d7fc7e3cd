"""What every recording probe shares (sync_floor, attn_floor): the cost of one step as a slope between two chain
lengths, and the ending: refuse without CUDA, measure, then write <name>.json and <name>.md atomically under --out
with the command, commit, card and versions, and print the table."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch


def slope(time_at: Callable[[int], float], steps: tuple[int, int], key: str) -> dict:
    """One step's cost from time_at(n), the time of a chain of n steps, at n = steps[0] and steps[1]: {key: the slope,
    us_lo, us_hi: the two times}. The chain's launch and first step's ramp cancel."""
    lo, hi = steps
    t_lo, t_hi = time_at(lo), time_at(hi)
    return {key: (t_hi - t_lo) / (hi - lo), "us_lo": t_lo, "us_hi": t_hi}


def record(name: str, argv: list[str] | None, out: Path, measure: Callable[[], list[dict]],
           render: Callable[[list[dict], dict], str], **extra) -> int:
    """Exit 2 with one line where there is no CUDA device (the probe's `check` runs on CPU in its tests); else
    measure(), and the rows, the environment and `extra` written. Nothing is written if measure raises."""
    if not torch.cuda.is_available():
        print(f"{name}: needs a CUDA device (on CPU, its `check` runs in tests/kselect/test_{name}.py)",
              file=sys.stderr)
        return 2
    from kselect.measurement.e2e.environment import environment
    from kselect.selector.base.files import atomic_write

    env = environment(sys.argv[1:] if argv is None else argv, script=f"-m kselect.measurement.probes.{name}")
    env["gpu"] = torch.cuda.get_device_name()
    rows = measure()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / f"{name}.json", json.dumps(dict(env=env, **extra, rows=rows), indent=1))
    md = render(rows, env)
    atomic_write(out / f"{name}.md", md)
    print(md)
    return 0
