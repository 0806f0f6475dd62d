"""The docs as pages: the README stays a front page that links every page, and every relative link leads to a
file and heading of this checkout (their commands: tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.conftest import ROOT
from tests.docs_commands import COMMANDS, PAGES

README_MAX_LINES = 220


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"
    install = [d.argv for d in COMMANDS if d.page == "README.md"][:2]
    assert install == [("pip", "install", "-e", ".[dev]"), ("pytest",)], "CI runs exactly these two, first"


def markdown_links(path: Path) -> List[Tuple[int, str]]:
    """(line, target) of every inline link and image outside code fences."""
    out, fence = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            code_free = re.sub(r"`[^`]*`", "", line)
            out += [(number, m.group(1)) for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", code_free)]
    return out


def anchors(path: Path) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: Dict[str, int] = {}
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#+ ", line):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for number, target in markdown_links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # http(s), mailto: not this checkout's
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{number}: {target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for _, t in markdown_links(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
