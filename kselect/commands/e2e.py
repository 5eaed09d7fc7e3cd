"""`python -m kselect.measurement.e2e`: the end-to-end harness's command line (kselect/measurement/e2e/, whose package
docstring is the usage), a flag per field of its typed Options; `kselect bench` steps give the same Options from an
experiment config instead. Every error: exit 2 and one paragraph (--debug: the traceback)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from kselect.gemma4.graphs import check_max_tokens
from kselect.measurement import e2e
from kselect.measurement.e2e import SELECTIONS, Options


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m kselect.measurement.e2e`: Options' fields as --options (defaults from Options)."""
    ap = argparse.ArgumentParser(prog="python -m kselect.measurement.e2e", description=e2e.__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float)
    ap.add_argument("--presets", nargs="+")
    ap.add_argument("--selections", nargs="+", choices=list(SELECTIONS))
    ap.add_argument("--kv", nargs="+")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--e4b-batch-64", action=argparse.BooleanOptionalAction,
                    help="also batch 64 for gemma4_e4b, last, if time permits")
    ap.add_argument("--prompt-len", type=int)
    ap.add_argument("--new", type=int)
    ap.add_argument("--hf-new", type=int, help="HF decode tokens (HF decode is slow; per-step time is flat)")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--check-batch", type=int)
    ap.add_argument("--check-steps", type=int)
    ap.add_argument("--capacity-gib", type=float)
    ap.add_argument("--platform")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--rules", help="rules for every selection (vllm_0_33_0: vLLM 0.33.0, the default rules of kselect)")
    ap.add_argument("--no-numerics", action="store_true", help="skip the per-call numerics check (conformance has it)")
    ap.add_argument("--prefill-lens", type=int, nargs="*",
                    help="also time B1 prefill of one prompt of each of these lengths, per selection")
    ap.add_argument("--chunk-sweep", type=int, nargs="*",
                    help="prefill chunk sizes (Engine max_step_tokens) timed for each --prefill-lens prompt")
    ap.add_argument("--chunk-selections", nargs="*")
    ap.add_argument("--skip", nargs="*", help="selection:kv pairs not to run (e.g. pin_triton:auto)")
    ap.add_argument("--profile-selections", nargs="*",
                    help="profile B1 eager decode steps (attention ms per step) for these selections")
    ap.add_argument("--objective-at-run", action=argparse.BooleanOptionalAction,
                    help="resolve objective selections at each run's own shapes (objective.decode.batch/context, "
                         "objective.prefill.context): one resolution per decode batch and per --prefill-lens prompt")
    ap.add_argument("--prefill-rounds", type=int,
                    help="after the B1 runs, time each prefill metric again in this many rounds that visit every "
                         "selection (kselect/measurement/prefill_rounds.py); the objective table reads those")
    ap.add_argument("--prefill-graph-tokens", type=int,
                    help="the longest prefill step that replays a CUDA graph (a bucket of gemma4/graphs.py); "
                         "--prefill-lens prompts up to it are timed on graphs in the interleaved rounds, longer ones eager")
    ap.add_argument("--smoke", action="store_true", help="CPU smoke run: gemma4_tiny, tiny sizes")
    ap.set_defaults(**{k: f.default for k, f in Options.model_fields.items() if k != "out"})
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    ns = ap.parse_args(argv)
    try:
        check_max_tokens(ns.prefill_graph_tokens)
    except ValueError as e:
        ap.error(f"--prefill-graph-tokens: {e}")
    command = shlex.join([Path(sys.executable).name, "-m", "kselect.measurement.e2e", *argv])
    return e2e.run(Options.model_validate(vars(ns)), command)


def cli() -> None:
    from kselect.commands.run import script_main  # noqa: PLC0415

    script_main(main)  # every error: exit 2, one paragraph (--debug: traceback)


if __name__ == "__main__":
    cli()
