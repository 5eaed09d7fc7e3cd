"""`kselect run [hydra overrides] [--options]`: select kernels, then run Gemma-4 on them.

    kselect run                                   # bundled gemma4_tiny, this machine
    kselect run kv_cache=fp8 kv_cache.scales=calibrated --max-new-tokens 32
    kselect run platform=sm90 model.checkpoint=/ckpt/gemma-4-e2b --prompt "Hello"

1. compose + validate the config (selector.api) and resolve the selection; print its table;
2. build the model: `model.checkpoint` (an HF folder) or seeded random weights for the preset;
3. generate for a few prompts, each KV-cache group's attention on the backend selected for it;
4. print the outputs, prefill/decode tokens/s and the backend per group; with --prefill-chunk, the
   chunk size, the prefill steps per prompt and the sliding-window pool's size (gemma4/chunk_report.py);
5. numerics: replay the same tokens with every attention call of the selected backends compared
   against TORCH_REFERENCE on the same inputs (gemma4/attention_check.py), each kernel held to its
   own bar (kernels/tolerances.py); exit 1 when a call fails. Groups that run TORCH_REFERENCE are
   not compared (it is the reference). Also printed: the end-to-end logit drift against an
   all-reference run and, for an FP8 cache, the error against an unquantized one.
"""

from __future__ import annotations

# A Hydra app over conf/config.yaml: its own --options are taken off the command line first (parser() maps them onto
# kselect/run.py's RunOptions); everything else (overrides, --cfg, --help, -m, hydra.*) goes to Hydra. Every error:
# exit 2 and one paragraph.

import argparse
import sys

from kselect.run import RunError, RunOptions, run
from kselect.selector.api import CONF_DIR
from kselect.selector.base.hydra_app import run_app, task_overrides


def _utf8(text: str) -> str:
    """A prompt as the tokenizer takes it: bytes that are not UTF-8 reach Python as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise argparse.ArgumentTypeError(f"not valid UTF-8 (byte {e.start} of the argument); allowed: UTF-8 text") from None
    return text


def _bounded(kind, lo, hi):
    """An argparse type: a number of `kind` in [lo, hi] (nothing is allocated from an unchecked number)."""

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"want a {kind.__name__} in [{lo}, {hi}], got {text!r}") from None
        if not lo <= v <= hi:  # also false for nan
            raise argparse.ArgumentTypeError(f"want a {kind.__name__} in [{lo}, {hi}], got {text!r}")
        return v

    return parse


def _positive_int(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1 << 20:
        raise argparse.ArgumentTypeError(f"want a positive token count, got {text!r}")
    return int(text)


def parser(add_help: bool = True) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kselect run", description=__doc__.split("\n")[0], add_help=add_help,
                                 allow_abbrev=False, epilog="Other arguments are Hydra overrides (see conf/config.yaml).")
    ap.add_argument("--prompt", action="append", type=_utf8, help="a prompt (repeat for a batch); default: 4 built-in prompts")
    ap.add_argument("--max-new-tokens", type=_bounded(int, 1, 1 << 16), default=24)
    ap.add_argument("--temperature", type=_bounded(float, 0.0, 100.0), default=0.0, help="0 = greedy")
    ap.add_argument("--top-k", type=_bounded(int, 0, 1 << 21), default=0)
    ap.add_argument("--seed", type=_bounded(int, 0, (1 << 63) - 1), default=0, help="sampling seed (and the random-weight seed)")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--prefill-chunk", type=_positive_int, default=None, metavar="N",
                    help="prefill prompts in steps of N tokens; the sliding-window cache then holds "
                         "window - 1 + N tokens per sequence instead of every token")
    ap.add_argument("--no-check", action="store_true", help="skip the TORCH_REFERENCE numerics check")
    ap.add_argument("--drafter", help="spec_decode=mtp: an HF Gemma4AssistantForCausalLM folder (default: seeded "
                    "tiny drafters with the preset's drafter: shapes)")
    return ap


def options(ns: argparse.Namespace) -> RunOptions:
    """The parsed flags as the library's typed options."""
    return RunOptions(prompts=tuple(ns.prompt or ()), max_new_tokens=ns.max_new_tokens, temperature=ns.temperature,
                      top_k=ns.top_k, seed=ns.seed, cuda_graphs=not ns.no_cuda_graphs, prefill_chunk=ns.prefill_chunk,
                      check=not ns.no_check, drafter=ns.drafter)


def parse(argv: list[str]) -> tuple[list[str], RunOptions]:
    """argv (overrides and --options, in any order) as the overrides and the typed options."""
    ap = parser()
    ns, overrides = ap.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        ap.error(f"unknown option(s) {bad}")
    return overrides, options(ns)


def main(argv: list[str]) -> int:
    """The command in-process, without Hydra's app (tests): the library's own errors are raised."""
    return run(*parse(argv))


def user_errors(fn):
    """fn(...) with the runner's own errors (RunError, CheckpointError, DrafterError, a missing kernel package)
    turned into KSelectError: the CLI prints them as one paragraph, exit 2."""
    from kselect.backends.base import BackendUnavailableError
    from kselect.gemma4.checkpoint import CheckpointError
    from kselect.gemma4.config import DrafterError
    from kselect.selector.base.errors import KSelectError

    def wrapped(*args) -> int:
        try:
            return fn(*args)
        except (RunError, CheckpointError, BackendUnavailableError) as e:
            raise KSelectError(str(e)) from e
        except DrafterError as e:  # --drafter's tensors (its config.json is checked before the run)
            raise KSelectError(f"--drafter: {e}") from e

    return wrapped


def script_main(fn) -> None:
    """A script that drives the run (the measurement's gemma4 drivers, the e2e harness) exits through here: every
    error is exit 2 and one paragraph (selector/base/cli_errors.py)."""
    from kselect.selector.base.cli_errors import call_main

    sys.exit(call_main(user_errors(fn), sys.argv[1:]))


def cli() -> None:
    ns, rest = parser(add_help=False).parse_known_args(sys.argv[1:])
    sys.argv[1:] = rest
    checked = user_errors(run)

    def task(cfg) -> int:
        return checked(task_overrides(), options(ns))

    opts_help = parser(add_help=False).format_help()
    doc = __doc__.rstrip() + "\n\nkselect run's own " + opts_help[opts_help.index("options:"):].rstrip()
    run_app("run", task, doc=doc, config_dir=CONF_DIR, config_name="config")


if __name__ == "__main__":
    cli()
