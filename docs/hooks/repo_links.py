"""MkDocs hook: links from a docs page to repository files outside docs/ (``../bench/results/...``).

MkDocs validates links between pages and anchors itself (``validation:`` in mkdocs.yml), but a link
that leaves docs/ is "not found among documentation files" to it. This hook checks each such link
against the repository instead (a missing path is a warning, so ``strict: true`` fails the build)
and rewrites it for the built site: to ``repo_url`` when mkdocs.yml sets one, else to the path as
code. On GitHub the Markdown's relative links work as written.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.repo_links")

# An inline Markdown link or image: [text](target "title"); reference-style links are not used here.
LINK = re.compile(r"(?<!\\)(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def outside_links(markdown: str):
    """(match, target) for each relative link in the Markdown's text, code fences and code spans skipped."""
    in_fence = False
    offset = 0
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line.lstrip()):
            in_fence = not in_fence
        elif not in_fence:
            spans = [m.span() for m in re.finditer(r"`[^`]*`", line)]
            for m in LINK.finditer(line):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                yield offset, m
        offset += len(line)


def resolve(page_src: Path, target: str) -> Path | None:
    """The path a relative link from page_src names, or None for URLs and in-page anchors. Normalised, not
    resolved: a symlinked folder stays inside the tree that links it."""
    path = target.split("#", 1)[0]
    if not path or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", path) or path.startswith("/"):
        return None
    return Path(os.path.normpath(page_src.parent / path))


def on_page_markdown(markdown, page, config, files):
    docs_dir = Path(os.path.abspath(config["docs_dir"]))
    repo_root = docs_dir.parent
    src = docs_dir / page.file.src_path
    out, last = [], 0
    for offset, m in list(outside_links(markdown)):
        bang, text, target, title = m.groups()
        dest = resolve(src, target)
        if dest is None or dest.is_relative_to(docs_dir):
            continue  # a URL, or a page or anchor MkDocs validates itself
        rel = dest.relative_to(repo_root).as_posix() if dest.is_relative_to(repo_root) else None
        if rel is None or not dest.exists():
            log.warning("Doc file '%s' links to '%s', which is not a file or folder of the repository.",
                        page.file.src_path, target)
            continue
        if config.get("repo_url"):
            new = f"{bang}[{text}]({config['repo_url'].rstrip('/')}/tree/HEAD/{rel}{title or ''})"
        else:
            new = text if text.startswith("`") else f"{text} (`{rel}`)"
        out.append(markdown[last:offset + m.start()] + new)
        last = offset + m.end()
    return "".join(out) + markdown[last:]
