"""kselect select [Hydra overrides]: the attention kernels selected per KV-cache layer group.

  kselect select platform=sm90 model=gemma4_31b kv_cache=fp8 output=json
  kselect select platform=sm90 kv_cache=fp8 model.multimodal=true rules=post_pr52987 overlay=[pr48666] verbose=true
  kselect select --cfg job platform=sm90          # the composed config, nothing resolved
  kselect select -m platform=sm80,sm90            # one selection per value (Hydra's multirun; its records go
                                                  # to multirun/<date>/<time>/ here, or hydra.sweep.dir=<dir>)
  kselect select cells=cells.jsonl objective=latency   # one answer (a JSON line) per line of overrides

output: table | json | markdown | vllm. Exit 2 with one paragraph on stderr for a bad config or
when no backend is valid.

cells=<file.jsonl> (`-` for stdin): each line a JSON object of overrides ({"platform": "sm90", "model":
"llama3_1_8b"}) or a list of override strings, after the command line's own; each answer one JSON line in
order: {"overrides", "exit", and "selection" (what output=json prints; the default here), "text" (any other
output=) or "error" (the paragraph kselect exits 2 with)}. All resolved in this process.
"""

from __future__ import annotations

import json
import sys

from kselect.selector.base.cli_errors import check_printable, check_renamed, debug_enabled, internal_error, report_error
from kselect.selector.base.errors import KSelectError
from kselect.selector.config.compose import CONF_DIR, compose
from kselect.selector.evidence.evidence import Evidence
from kselect.selector.export.formats import render
from kselect.selector.measure.select import select

from .plain import run_plain

RENAMED = {"overlays": "write overlay=[pr48666,...] (the config group conf/overlay/)"}


def main(argv: list[str]) -> int:
    """In-process `kselect select` (tests, fuzzing): overrides -> guard, compose, validate, resolve."""
    check_renamed("select", argv, RENAMED)
    _answer(compose(argv))
    return 0


def task(cfg) -> int:
    """The Hydra app's job (flags, multirun): the job's overrides through main (compose hits the cache)."""
    from kselect.selector.base.hydra_app import task_overrides  # noqa: PLC0415

    return main(task_overrides())


def _answer(cfg) -> None:
    print(render(select(cfg, Evidence.load(CONF_DIR)), cfg.output, cfg.verbose, cfg))  # the conf tree's own evidence


def bulk(argv: list[str]) -> int:
    """`cells=<file.jsonl>`: every line's answer as a JSON line (selector/review/bulk.py)."""
    from kselect.selector.review.bulk import answer_all, read_requests  # noqa: PLC0415

    paths = [a.partition("=")[2] for a in argv if a.startswith("cells=")]
    common = [a for a in argv if not a.startswith("cells=")]
    try:
        if len(paths) != 1 or not paths[0] or any(a.startswith("-") for a in common):
            raise KSelectError("select: cells=<file.jsonl> takes one file (`-`: stdin) and overrides, no flags; "
                               f"got {' '.join(argv)}")
        check_renamed("select", common, RENAMED)
        text = sys.stdin.read() if paths[0] == "-" else None
        reqs = [r if isinstance(r, KSelectError) else [*common, *r] for r in read_requests(paths[0], text)]
    except (KSelectError, OSError, UnicodeDecodeError) as e:
        report_error(e if isinstance(e, KSelectError) else f"select: cells={paths[0]}: cannot read it ({e})")
        return 2
    for a in answer_all(reqs, CONF_DIR):
        explicit = any(o.lstrip("+").partition("=")[0] == "output" for o in a.overrides)
        print(json.dumps(a.record(None if explicit else "json"), separators=(",", ":")))
    return 0


def fast_path(argv: list[str]) -> int | None:
    """Bulk cells, or overrides alone composed here (kselect/commands/plain.py); None: the Hydra app's turn (flags,
    a compose error)."""
    if any(a.startswith("cells=") for a in argv):
        try:
            check_printable(argv)
        except KSelectError as e:
            report_error(e)
            return 2
        return bulk(argv)
    return run_plain("select", argv, _answer, RENAMED)


def cli() -> None:
    argv = sys.argv[1:]
    try:
        code = fast_path(argv)
    except Exception as e:  # noqa: BLE001 - the backstop kselect/cli.py gives every command: exit 3, one paragraph
        if "--debug" in argv or debug_enabled():
            raise
        report_error(internal_error(e, ["kselect", "select", *argv]))
        sys.exit(3)
    if code is not None:
        sys.exit(code)
    from kselect.selector.base.hydra_app import run_app  # noqa: PLC0415 - Hydra's app only for its flags, or to report an error

    run_app("select", task, doc=__doc__, config_name="config", config_dir=CONF_DIR, renamed=RENAMED)


if __name__ == "__main__":
    cli()
