"""`kselect perf`: time verified kernels over shape buckets (kselect/measurement/perf.py, whose module docstring is the
usage); errors are one paragraph with exit 2."""

from __future__ import annotations

import argparse
import shlex

from kselect.measurement import perf
from kselect.measurement.perf import PerfRun
from kselect.selector.base.cli_errors import run_cli


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kselect perf", description=perf.__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-name", required=True, help="GPU model key, e.g. nvidia_h200 (conf/conformance/<name>.yaml)")
    ap.add_argument("--conformance", default=None, help="conformance file (default conf/conformance/<gpu-name>.yaml)")
    ap.add_argument("--out", default=None, help="perf file (default conf/perf/<gpu-name>.yaml); merged, atomic")
    ap.add_argument("--models", default="gemma4_31b", help="comma-separated conf/model names whose shapes to time")
    ap.add_argument("--decode", default="1x1024,1x8192,16x1024,16x8192,64x1024,64x8192", help="BxC buckets")
    ap.add_argument("--prefill", default="1x512,1x4096", help="BxC buckets (C = prompt tokens)")
    ap.add_argument("--kernels", default="", help="only these paths (e.g. FLASHINFER,FLASH_ATTN_v4)")
    ap.add_argument("--kv", default="", help="only these KV dtypes (e.g. bf16,fp8)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--device", default=None, help="default: cuda where available, else cpu")
    ap.add_argument("--warm-jobs", type=int, default=0, help="compile every target first in N processes")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new targets after this many seconds")
    ap.add_argument("--platform", default=None, help="the selector's platform for each claim's page/descale "
                    "(default: auto, cpu on --device cpu), as `kselect conformance`")
    ap.add_argument("--rules", default="", help="comma-separated conf/rules presets whose reachable pages to time "
                    "(default: the config's own rules)")
    ap.add_argument("--fence", default="",
                    help="KIND:MIB: time each call after a fence (CUDA graphs): "
                         "gemv:MIB reads MIB of bf16 weights as a layer's projections do (figure: the graph less the "
                         "fences' own), layer:MIB adds the small kernel a model runs between them and attention "
                         "(figure: the calls' kernels on the graph's profiled timeline), write:MIB zeroes MIB; "
                         "no overlap with the next call and cold K/V, as inside a model step")
    ap.add_argument("--context-spread", type=float, default=0.0,
                    help="decode buckets: time contexts spread over +-this fraction of each bucket's context (mean "
                    "over the range; 0: the one context)")
    ap.add_argument("--max-page", type=int, default=128, help="time reachable pages up to this many tokens")
    ap.add_argument("--missing", action="store_true", help="time only the buckets the --out file does not hold yet "
                    "(a prefill bucket without host_ms, or a graph-timed one without plan_ms, counts as missing)")
    ap.add_argument("--dry-run", action="store_true", help="list the buckets this command would time (with --missing: "
                    "what the file lacks) and exit; times nothing, writes nothing, needs no GPU with --platform")
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return perf.run(PerfRun(**vars(args)), shlex.join(["kselect", "perf", *argv]))


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
