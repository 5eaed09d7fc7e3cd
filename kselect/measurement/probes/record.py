"""The ending every recording probe shares (sync_floor, attn_floor): refuse without CUDA, measure, then write
<name>.json and <name>.md atomically under --out with the command, commit, card and versions, and print the table."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch


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
