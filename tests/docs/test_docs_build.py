"""The docs build (MkDocs, strict, mkdocs.yml) and its link check: the site builds with no warning; a link to a
missing page, a missing anchor or a missing repository path fails the build (shown on temp copies with one broken
link each); every relative link of the README and of docs/ names an existing path, and the README's anchors into
docs/ exist in the built pages. The build tests skip only when MkDocs (the `docs` extra) is not installed."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HAS_MKDOCS = importlib.util.find_spec("mkdocs") is not None
needs_mkdocs = pytest.mark.skipif(not HAS_MKDOCS, reason="MkDocs not installed: pip install -e '.[docs]'")


def _hook():
    """docs/hooks/repo_links.py, the link finder the build uses (no MkDocs import)."""
    spec = importlib.util.spec_from_file_location("repo_links", DOCS / "hooks" / "repo_links.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], cwd=root, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not HAS_MKDOCS:
        pytest.skip("MkDocs not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    p = build(ROOT, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "WARNING" not in p.stderr, p.stderr
    return out


def page_html(site: Path, md: str) -> Path:
    """The built file of docs/<md> (use_directory_urls: kernels.md -> kernels/index.html)."""
    stem = md.removesuffix(".md")
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


@needs_mkdocs
def test_every_page_is_built(site):
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert "index.md" in pages and len(pages) >= 10
    for md in pages:
        assert page_html(site, md).is_file(), md


def _copy_with(tmp_path: Path, page: str, extra: str) -> Path:
    """A copy of docs/ and mkdocs.yml with `extra` appended to one page; the rest of the repository is linked in,
    so links to repository files resolve as in the checkout."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    for p in ROOT.iterdir():
        if p.name not in ("docs", "mkdocs.yml", ".git", ".venv", "site"):
            (root / p.name).symlink_to(p)
    if extra:
        with open(root / "docs" / page, "a") as f:
            f.write(f"\n{extra}\n")
    return root


@needs_mkdocs
@pytest.mark.parametrize("page, extra, fails_with", [
    ("index.md", "", None),  # the copy itself builds: a failure below is the broken link's
    ("index.md", "See [nothing](no-such-page.md).", "no-such-page.md"),
    ("selecting.md", "See [nothing](kernels.md#no-such-anchor).", "no-such-anchor"),
    ("selecting.md", "See [nothing](#no-such-heading).", "no-such-heading"),
    ("performance.md", "See [nothing](../bench/results/no-such-record/).", "no-such-record"),
    ("gemma4.md", "See [nothing](../gemma4/no_such_module.py).", "no_such_module.py"),
], ids=["control", "page", "anchor", "in-page-anchor", "repo-folder", "repo-file"])
def test_a_broken_link_fails_the_build(tmp_path, page, extra, fails_with):
    root = _copy_with(tmp_path, page, extra)
    p = build(root, tmp_path / "site")
    if fails_with is None:
        assert p.returncode == 0, p.stdout + p.stderr
    else:
        assert p.returncode != 0, "the build passed with a broken link"
        assert fails_with in p.stderr and "WARNING" in p.stderr, p.stderr


def _links(md: Path):
    hook = _hook()
    text = md.read_text()
    for _, m in hook.outside_links(text):
        yield m.group(3), hook.resolve(md, m.group(3))


@pytest.mark.parametrize("md", ["README.md"] + sorted(f"docs/{p.name}" for p in DOCS.glob("*.md")))
def test_relative_links_name_existing_paths(md):
    """Runs without MkDocs too: every relative link of the README and of docs/ resolves to a repository path."""
    bad = [t for t, dest in _links(ROOT / md) if dest is not None and not dest.exists()]
    assert not bad, f"{md} links to missing paths: {bad}"
    assert all(dest is None or dest.is_relative_to(ROOT) for _, dest in _links(ROOT / md)), md


@needs_mkdocs
def test_readme_anchors_into_docs_exist(site):
    """MkDocs checks the anchors between pages; the README is not a page, so its anchors are checked here
    against the ids of the built pages."""
    checked = 0
    for target, dest in _links(ROOT / "README.md"):
        if dest is None or "#" not in target or not dest.is_relative_to(DOCS):
            continue
        anchor = target.split("#", 1)[1]
        html = page_html(site, dest.relative_to(DOCS).as_posix()).read_text()
        assert re.search(rf'\bid="{re.escape(anchor)}"', html), f"README: {target}: no such anchor"
        checked += 1
    assert checked >= 1


def test_readme_is_a_front_page():
    """At most 200 lines; prose wrapped at 120 characters (tables and code blocks may run longer)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    fence = False
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and not line.lstrip().startswith("|"):
            assert len(line) <= 120, f"README.md:{i} is {len(line)} characters"


def test_link_finder_skips_code_and_finds_links(tmp_path):
    """The finder behind both checks: links in code spans and fences are text, not links."""
    md = tmp_path / "docs" / "page.md"
    md.parent.mkdir()
    md.write_text("A [real](../missing/) link, `[code](../in_span/)`, [url](https://example.org/x), "
                  "[anchor](#here).\n\n```bash\necho [fenced](../in_fence/)\n```\n")
    found = {t: dest for t, dest in _links(md)}
    assert set(found) == {"../missing/", "https://example.org/x", "#here"}
    assert found["../missing/"] == tmp_path / "missing" and not found["../missing/"].exists()
    assert found["https://example.org/x"] is None and found["#here"] is None



def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading (as github-slugger): lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@needs_mkdocs
@pytest.mark.parametrize("md", sorted(f"docs/{p.name}" for p in DOCS.glob("*.md")))
def test_headings_give_the_same_anchor_on_github_and_mkdocs(md):
    """The build checks anchors in MkDocs' slugs (Python-Markdown's toc); links must work on GitHub too, whose
    slugs differ once a heading holds non-ASCII letters or a spaced hyphen."""
    from markdown.extensions.toc import slugify

    fence = False
    for line in (ROOT / md).read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            heading = line.lstrip("#").strip()
            assert slugify(heading, "-") == github_slug(heading), f"{md}: {line!r}"
