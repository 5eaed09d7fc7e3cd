"""`kselect bench experiment=<name> [key=value ...]`: one recorded measurement, run from the checkout root.

Each measurement is an experiment config, bench/conf/experiment/<name>.yaml (Hydra, as lightning-hydra-template's
`experiment/` configs): the steps it runs in order, each one of the project's own measurement steps by name
(kselect/measurement/steps.py: e2e, prefill_clocks, explain_vs_e2e) with its options, and the bench/results folder it
was recorded in. Each step's options are validated into that step's typed options before anything runs; a step then
runs in its own process (`python -m kselect.measurement.steps <step> <options.json>`). `dry_run=true` composes and
validates, prints what would run and runs nothing (no GPU needed); `--list` names the experiments.

    kselect bench experiment=rounds_e31p                    # on the H200
    kselect bench experiment=rounds_e31p steps.e2e.options.prefill_rounds=61 out=/tmp/e31p
    kselect bench experiment=rounds_e31p dry_run=true       # anywhere: what it would run, checked
"""
from __future__ import annotations

# A tool command (run_cli: --debug, the backstop): its own --help and --list, the rest Hydra overrides of the
# experiment, composed and run by the library (kselect/measurement/runner.py). Bad input: exit 2, one paragraph.

import sys
from pathlib import Path

from kselect.measurement.runner import BenchError, compose, experiments, find_root, run
from kselect.selector.base.cli_errors import run_cli


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        root = find_root(Path.cwd())
        if argv[:1] == ["--list"]:
            for name in experiments(root):
                print(name)
            return 0
        return run(root, compose(root, argv))
    except BenchError as e:
        print(e, file=sys.stderr)
        return 2


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
