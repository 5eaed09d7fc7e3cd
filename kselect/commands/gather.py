"""`kselect gather <multirun dir> [format=table|markdown|json]`: one table of a sweep (selector/review/gather.py, whose
module docstring is the usage)."""

from __future__ import annotations

import json
from pathlib import Path

from kselect.selector.base.cli_errors import run_cli
from kselect.selector.base.errors import KSelectError
from kselect.selector.review import gather
from kselect.selector.review.gather import load_jobs, markdown, table
from kselect.selector.review.matrix import cli_args
from kselect.selector.base.reading import check_lengths, short


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(gather.__doc__.strip())
        return 0 if argv else 2
    check_lengths(argv[0], f"gather: {short(argv[0])}")  # a name the file system cannot take: exit 2, not an OSError
    root = Path(argv[0])
    args = cli_args(argv[1:], {"format": "table"}, "kselect gather")
    if args["format"] not in ("table", "markdown", "json"):
        raise KSelectError(f"gather: format={args['format']!r}; allowed: table, markdown, json")
    if not root.is_dir():
        raise KSelectError(f"gather: {root} is not a directory")
    jobs = load_jobs(root)
    if not jobs:
        raise KSelectError(f"gather: no selection.json under {root} (run kselect sweep -m ... first)")
    for j in jobs:
        j.pop("_dir", None) if args["format"] == "json" else None
    if args["format"] == "json":
        print(json.dumps(jobs, indent=2))
    elif args["format"] == "markdown":
        print(markdown(root, jobs))
    elif args["format"] == "table":
        print(table(root, jobs))
    else:
        raise KSelectError(f"gather: format={args['format']!r}; allowed: table, markdown, json")
    return 0


def cli() -> None:
    run_cli(main)


if __name__ == "__main__":
    cli()
