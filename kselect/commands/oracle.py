"""`kselect oracle`: run a vLLM release's own selection over the grid and compare it with a rules preset
(kselect/oracle/track.py, whose module docstring is the usage). Bad input: exit 2 and one paragraph.
KSELECT_ORACLE_TIME=1 prints the command's wall time."""

from __future__ import annotations

import argparse
import os
import sys
import time

from kselect.oracle import track
from kselect.oracle.cells import GRIDS, PLATFORMS
from kselect.oracle.track import BadInput, OracleRun


def _percent(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0.0 <= v <= 100.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage between 0 and 100 (e.g. 99.5)")
    return v


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return v


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one paragraph, exit 2 (argparse's own usage dump is not one)
        raise BadInput(f"kselect oracle: {message}. See `kselect oracle --help`.")


def parser() -> argparse.ArgumentParser:
    # --help is a page: the summary and examples (the rest of the docstring is docs/vllm.md's)
    summary = track.__doc__.strip().split("\n\n")[:2]
    p = _Parser(prog="kselect oracle", description=summary[0] + " What it does: docs/vllm.md.\n\n" + summary[1],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a vLLM version on the package registry (e.g. 0.34.0, or `latest`), a wheel "
                                  "(vllm-VERSION-*.whl) or an unpacked source folder")
    p.add_argument("--rules", default=None,
                   help="kselect's rules= option to compare with (default: vllm_<version> if it exists, else the "
                        "config's default)")
    p.add_argument("--grid", choices=GRIDS, default="gemma4",
                   help="gemma4 (default); models: other presets; registry: text decoders; wrappers: their "
                        "multimodal wrappers")
    p.add_argument("--out", default=None, help="the record (default: oracle_[<grid>_]<version>.jsonl.gz "
                                               "here)")
    p.add_argument("--min-agreement", type=_percent, default=99.5, metavar="PCT",
                   help="exit 1 when any field agrees on less than this percentage (default 99.5)")
    p.add_argument("--jobs", type=_positive, default=2, help="worker processes (or Ray actors) at once (default 2)")
    p.add_argument("--batch-size", type=_positive, default=48, help="cells per batch (default 48)")
    p.add_argument("--ray-address", default=None,
                   help="run the batches as Ray actors: `local` (start Ray here), `auto` or host:port (a running cluster); "
                        "the record is byte-identical to a run without it (pip install 'kselect[ray]')")
    p.add_argument("--examples", type=_positive, default=3, help="example cells per disagreement class (default 3)")
    p.add_argument("--limit", type=_positive, default=None, help="print at most this many disagreement classes")
    p.add_argument("--report", default=None, help="also write the report as Markdown to this file (a CI summary)")
    p.add_argument("--json", dest="json_out", default=None, help="also write the report as JSON to this file")
    p.add_argument("--no-compare", action="store_true", help="only run the record")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve the release, the cells and what is cached or already recorded; run nothing")
    g = p.add_argument_group("grid filters (default: the full grid; --fa, --spec: gemma4's; --mm: gemma4's, wrappers')")
    g.add_argument("--cc", nargs="+", default=list(PLATFORMS), metavar="CC")
    g.add_argument("--model", nargs="+", default=None)
    g.add_argument("--kv", nargs="+", default=None)
    g.add_argument("--mm", nargs="+", default=None)
    g.add_argument("--fa", nargs="+", default=None)
    g.add_argument("--backend", nargs="+", default=None)
    g.add_argument("--spec", nargs="+", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    """The command's exit status: 0, 1 (an agreement below the bar, or vLLM's worker died) or 2 (bad input)."""
    from kselect.oracle.records import RecordError
    from kselect.oracle.run import RayUnavailable, WorkerError
    from kselect.selector.base.errors import KSelectError

    try:
        args = vars(parser().parse_args(argv))
        return track.track(OracleRun(**{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}))
    except BadInput as e:
        print(str(e), file=sys.stderr)
        return 2
    except RecordError as e:
        print(f"kselect oracle: --out: not an oracle record this command can resume or compare: {e}; give a new path "
              "or the record `kselect oracle` wrote.", file=sys.stderr)
        return 2
    except RayUnavailable as e:
        print(f"kselect oracle: {e}", file=sys.stderr)
        return 2
    except WorkerError as e:  # vLLM's worker died: finished batches are kept, a re-run resumes
        print(f"kselect oracle: {e}", file=sys.stderr)
        return 1
    except KSelectError as e:
        print(f"kselect oracle: {e}", file=sys.stderr)
        return 2


def cli() -> None:
    from kselect.selector.base.cli_errors import call_main

    t0 = time.perf_counter()
    rc = call_main(main, sys.argv[1:])  # a bug: exit 3 and one paragraph (main reports bad input itself)
    if os.environ.get("KSELECT_ORACLE_TIME"):
        print(f"oracle: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    cli()
