"""Every relative link and image in the project's Markdown points at a file that exists, so a
moved page or a renamed figure fails here rather than in a reader's browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Folders that are not the project's pages: the virtual environment, build and run outputs.
SKIP = {".venv", ".git", "results", "bench-results", "build", "data", "node_modules"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md")
                  if not SKIP & set(p.relative_to(ROOT).parts[:1])
                  and ".egg-info" not in str(p))


def relative_targets(page: Path) -> list[str]:
    """The link targets of ``page`` that name a file of this checkout (no scheme, no bare
    anchor), without their ``#fragment``."""
    targets = (m.group(1).split("#")[0] for m in LINK.finditer(page.read_text()))
    return [t for t in targets if t and "://" not in t and not t.startswith("mailto:")]


def test_the_link_pattern_reads_links_and_images():
    page = "see [a](docs/a.md#x), ![fig](img/f.png \"t\"), [web](https://x.org), [top](#y)"
    assert [m.group(1) for m in LINK.finditer(page)] == [
        "docs/a.md#x", "img/f.png", "https://x.org", "#y"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    missing = [t for t in relative_targets(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"
