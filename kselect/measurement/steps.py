"""The project's own measurement steps, by name: each a module with a typed `Options` model and `run(options)`.
An experiment (bench/conf/experiment/<name>.yaml) names its steps from STEPS and gives their options as a mapping,
validated into the step's Options (kselect/measurement/runner.py); nothing else runs.

    python -m kselect.measurement.steps e2e /tmp/kselect_bench/x/e2e.json     # what `kselect bench` runs per step
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from pathlib import Path

from pydantic import BaseModel

STEPS = {
    "e2e": "kselect.measurement.e2e",  # the end-to-end harness: selections timed on the bundled model
    "prefill_clocks": "kselect.measurement.prefill_clocks",  # a graphed prefill step's host phases, round by round
    "explain_vs_e2e": "kselect.measurement.explain_vs_e2e",  # `kselect explain`'s prediction beside an e2e run
    "answers": "kselect.measurement.answers",  # how fast kselect answers: select, --help, bulk, diff, claims (CPU)
}


def options_of(step: str) -> type[BaseModel]:
    """The typed options of a step."""
    return importlib.import_module(STEPS[step]).Options


def main(argv: list[str]) -> int:
    """Run one step on its options file (a JSON mapping, validated again here)."""
    step, path = argv
    module = importlib.import_module(STEPS[step])
    command = shlex.join([Path(sys.executable).name, "-m", "kselect.measurement.steps", *argv])  # what its record says
    return module.run(module.Options.model_validate(json.loads(Path(path).read_text())), command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
