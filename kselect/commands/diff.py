"""`kselect diff`'s command line: the Hydra config of the two sides, mapped onto the library: the sides
(selector/review/diff_sides.py), the diff itself (cells, blocks: `selector/review/diff.py`, whose docstring is the
usage) and its rendering."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from kselect.selector.base.errors import KSelectError
from kselect.selector.base.hydra_app import compose_args, run_app
from kselect.selector.config.releases import render_steps, upgrade_steps
from kselect.selector.review import diff
from kselect.selector.review.diff import run_diff
from kselect.selector.review.diff_render import render
from kselect.selector.review.diff_sides import sides, with_rules
from kselect.selector.review.diff_sources import Source, check_conf_rel
from kselect.selector.review.matrix import load_matrix
from kselect.selector.review.review_check import review


@dataclass
class SideArgs:
    conf: str = "worktree"  # worktree | git:<rev> (read with git archive)
    overlay: list[str] = field(default_factory=list)
    objective: str = ""  # objective=<name> composed into every cell of this side
    rules: str = ""  # this side's rules option; "": the diff's rules=, else the matrix's, else its conf's default


@dataclass
class DiffArgs:
    a: SideArgs = field(default_factory=SideArgs)
    # b follows a's overlays and objective, never a's rules (a.rules is for a revision that names them differently)
    b: SideArgs = field(default_factory=lambda: SideArgs(overlay="${a.overlay}", objective="${a.objective}"))  # type: ignore[arg-type]
    matrix: str = ""  # "": `default` (review=true: every matrix declaring `review: true`)
    format: str = "table"  # table | markdown | json
    check: bool = False
    limit: int = 8
    repo: str | None = None  # the git repository of git:<rev> sources; default this checkout
    conf_path: str = "conf"  # conf/ inside that repository
    rules: str = ""  # both sides under this rules option; "": the one the matrix declares
    verbose: bool = False  # every warning block; default: notes about the evidence as one line (json: all)
    review: bool = False  # the review check: a diff per rules option the conf/ change reaches (selector/review/touched.py)


ConfigStore.instance().store(name="kselect_diff", node=DiffArgs)
RENAMED = {
    "a": "write a.overlay=[...] for an overlay set and a.conf=git:<rev> for a revision of conf/",
    "b": "write b.overlay=[...] for an overlay set and b.conf=git:<rev> for a revision of conf/",
    "overlays": "write a.overlay=[...] (b.overlay follows a.overlay unless given)",
    "conf": "write conf_path=<conf/ inside the repository>",
    "objective": "write a.objective=<name> (b.objective follows a.objective unless given)",
    "a_objective": "write a.objective=<name>",
    "b_objective": "write b.objective=<name>",
}


def task(cfg) -> int:
    if cfg.format not in ("table", "markdown", "json"):
        raise KSelectError(f"diff: format={cfg.format!r}; allowed: table, markdown, json")
    if not 0 <= cfg.limit <= 10_000:
        raise KSelectError(f"diff: limit={cfg.limit}; allowed: 0 to 10000 patterns per block")
    check_conf_rel(cfg.conf_path)
    with ExitStack() as stack:
        repo, a, b = sides(cfg, stack)
        if cfg.review:
            return _review(cfg, a, b)
        spec = load_matrix(cfg.matrix or "default", repo / cfg.conf_path)
        a, b, ran = with_rules(cfg, a, b, spec.rules)
        d = run_diff(a, b, spec)
        steps = upgrade_steps(a.conf_dir, ran[0], b.conf_dir, ran[1])  # a release upgrade: its overlays and PRs
    head = render_steps(steps, cfg.format)
    if head:
        print(head)
    print(render(d, cfg.format, cfg.limit, cfg.verbose))
    return 1 if cfg.check and d.changed else 0


def _review(cfg, a: Source, b: Source) -> int:
    if cfg.rules or cfg.a.rules or cfg.b.rules or a.overlays or b.overlays or cfg.a.objective or cfg.b.objective:
        raise KSelectError("diff: review=true picks the rules options and overlay sets the conf/ change reaches; "
                           "allowed with it: a.conf, b.conf, matrix, format, check, limit, verbose, repo, conf_path")
    text, moved = review(a, b, cfg.matrix, cfg.format, cfg.limit, cfg.verbose)
    print(text, end="")
    return 1 if cfg.check and moved else 0


def main(argv: list[str]) -> int:
    return task(compose_args("diff", "kselect_diff", argv, RENAMED))


def cli() -> None:
    run_app("diff", task, doc=diff.__doc__, config_name="kselect_diff", renamed=RENAMED)


if __name__ == "__main__":
    cli()
