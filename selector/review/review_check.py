"""The review check (`kselect diff a.conf=git:<rev> review=true`, kselect/measurement/review/conf_diff.sh): one diff per
rules option the change touches and matrix that reviews it (selector/review/touched.py), every changed
cell listed, exit 1 when any cell moved."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from ..review.diff import run_diff
from ..review.diff_render import render
from ..review.diff_sources import Source, side_rules
from ..review.touched import Run, changed_files, plan, review_matrices, touched_rules


def _sides(a: Source, b: Source, run: Run) -> tuple[Source, Source]:
    """Both sides under the run's rules option and overlay set; a side whose tree lacks the option runs its
    own default (a release added by the change), said on stderr and in its label."""
    out = []
    for name, src in (("a", a), ("b", b)):
        rules, note = side_rules(name, src.label, src.conf_dir, "", run.rules)
        if note:
            print(note, file=sys.stderr)
        label = f"{src.label.split(':[')[0]}:[{','.join(run.overlays)}]" + ("" if rules else " (its default rules)")
        out.append(replace(src, label=label, overlays=run.overlays, rules=rules, own_default_rules=bool(note)))
    return out[0], out[1]


def review(a: Source, b: Source, matrix: str, fmt: str, limit: int, verbose: bool = False) -> tuple[str, bool]:
    """(the document, whether any cell changed)."""
    changed = changed_files(a.conf_dir, b.conf_dir)
    rules = touched_rules(a.conf_dir, b.conf_dir, changed)
    runs = plan(rules, review_matrices(b.conf_dir, matrix))
    parts, moved, docs = [], False, []
    for run in runs:
        sa, sb = _sides(a, b, run)
        d = run_diff(sa, sb, run.matrix)
        moved |= bool(d.changed)
        if fmt == "json":
            docs.append({"rules": run.rules, "matrix": run.matrix.name, "overlays": list(run.overlays),
                         "diff": json.loads(render(d, "json", limit))})
        else:
            head = f"#### {run.title}" if fmt == "markdown" else f"== {run.title}"
            parts += [head, "", render(d, fmt, limit, verbose).rstrip(), ""]
    if fmt == "json":
        return json.dumps({"changed_files": changed, "rules": {r: None if ov is None else sorted(ov) for r, ov in rules.items()},
                           "runs": docs}, indent=2), moved
    files = ", ".join(changed) or "none"
    what = ", ".join(r if ov is None else f"{r} (overlays {', '.join(sorted(ov))})" for r, ov in rules.items()) or "none"
    head = (f"**kselect review: conf/ files changed: {files}; rules options they reach: {what}; "
            f"{len(runs)} diffs, {'cells changed' if moved else 'no cell changed'}**" if fmt == "markdown" else
            f"kselect review: conf/ files changed: {files}; rules options they reach: {what}; {len(runs)} diffs, "
            f"{'cells changed' if moved else 'no cell changed'}")
    if not runs:
        head += "\n\nNo cell changed: the change reaches no rules option's selections."
    return "\n".join([head, "", *parts]).rstrip() + "\n", moved
