"""docs/design.md is the design every file cites: no product file points outside the
repository for it, and every "design.md §N" names a numbered heading of that page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
PRODUCT = ("README.md", "docs", "benchmark", "baselines", "netem", "reports", "pyproject.toml",
           "Makefile")
CITING = PRODUCT + ("tests",)

HEADING = re.compile(r"^#{2,6} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)
CITATION = re.compile(r"design\.md((?:\s*(?:,|and|–|-)?\s*§\s?\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
OLD_SPEC = re.compile(r"deco-sgd\.md`?\s*(?:§|section \d)|\bbaselines\.md\b|\binterfaces\.md\b")
OLD_SPEC_ALLOWED = ("docs/design.md",  # its table maps the old citations to its sections
                    "docs/results/")   # committed copies of real reports keep their wording


def _text_files(names: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    for name in names:
        top = ROOT / name
        paths = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in paths:
            rel = path.relative_to(ROOT).as_posix()
            if (not path.is_file() or "__pycache__" in path.parts or ".egg-info" in rel
                    or rel.startswith("tests/data/")):
                continue
            try:
                yield rel, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # binary files cite nothing


def _sections() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text(encoding="utf-8")))


def test_design_has_the_numbered_sections():
    sections = _sections()
    # time model, DD-EF-SGD, planner and Φ, metrics, checks, baselines, interfaces, gaps, map
    assert {"2", "3", "4", "5", "6", "7", "8", "9", "10", "11"} <= sections
    assert {"4.2", "4.3", "4.4", "5.1", "5.3", "5.4", "5.5", "8.1", "8.2", "8.3", "8.4",
            "8.5", "8.6", "9.1", "9.3", "9.4"} <= sections


def test_no_product_file_points_at_the_external_spec():
    hits = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
            for rel, text in _text_files(PRODUCT) for m in re.finditer("shared/spec", text)]
    assert not hits, f"cite docs/design.md instead of ../shared/spec: {hits}"


def test_no_product_file_cites_the_old_spec_files():
    hits = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for rel, text in _text_files(PRODUCT) if not rel.startswith(OLD_SPEC_ALLOWED)
            for m in OLD_SPEC.finditer(text)]
    assert not hits, f"cite docs/design.md §N instead (its §11 maps old sections): {hits}"


def test_every_cited_design_section_exists():
    sections = _sections()
    cited = [(rel, number) for rel, text in _text_files(CITING)
             for m in CITATION.finditer(text) for number in SECTION.findall(m.group(1))]
    assert len(cited) > 50, "the code cites docs/design.md throughout"
    missing = sorted({f"{rel}: §{number}" for rel, number in cited if number not in sections})
    assert not missing, f"design.md has no such numbered heading: {missing}"


def test_design_cross_references_resolve():
    text = DESIGN.read_text(encoding="utf-8")
    missing = sorted(set(SECTION.findall(text)) - _sections())
    assert not missing, f"design.md refers to sections it does not have: {missing}"


def test_design_and_readme_point_at_each_other():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    design = " ".join(DESIGN.read_text(encoding="utf-8").split())
    assert "docs/design.md" in readme
    assert "## Where this project filled gaps in the paper" in readme
    assert 'section "Where this project filled gaps in the paper"' in design
