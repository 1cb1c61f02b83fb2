"""The committed copy of the CPU paper tier's claims table (docs/results/cpu-paper.md).

It is copied from a real ``make reproduce SUITE=cpu-paper`` report, so these tests check
that it still belongs to the shipped suite and to the report code: every claim the report
makes, in its order, each with a verdict the report can give, the run count of the suite as
it is now, and a README that links it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_tables import table

from decobench.reports.claims import VERDICTS, base_verdict, claim_rows
from decobench.sweeps.suite import (
    expand_cells,
    load_suite,
    write_constant_traces,
    write_realised_traces,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results" / "cpu-paper.md"


def test_claims_table_lists_every_claim_with_a_verdict():
    rows = table(DOC.read_text(), "claim")
    expected = [row.claim for row in claim_rows([], [])]
    assert [r["claim"] for r in rows] == expected
    assert all(base_verdict(r["verdict"]) in VERDICTS for r in rows)


SUPERSEDED = re.compile(r"^\*\*Superseded\.\*\* [^#]*?The tier now has (\d+) runs", re.MULTILINE)
"""A page whose tier has changed since its report says so at the top, with the new run
count, until the tier is run again and its table copied."""


def test_doc_matches_the_shipped_suite(tmp_path):
    suite, _ = load_suite("cpu-paper")
    write_constant_traces(suite, tmp_path)
    write_realised_traces(suite, tmp_path)
    runs = len(expand_cells(suite, tmp_path))
    text = DOC.read_text()
    match = re.search(r"(\d+) runs", text)
    assert match, "the doc states how many runs the tier has"
    if int(match.group(1)) == runs:
        assert not SUPERSEDED.search(text), "the page matches the suite: drop the notice"
        return
    superseded = SUPERSEDED.search(text)
    assert superseded and int(superseded.group(1)) == runs, (
        "benchmark/suites/cpu-paper.yaml changed: run `make reproduce SUITE=cpu-paper` and "
        "copy its claims table again, or say at the top of the page that it is superseded "
        f"('**Superseded.** ... The tier now has {runs} runs ...')")


@pytest.mark.parametrize("page", ["README.md", "docs/suites.md"])
def test_linked(page):
    assert "results/cpu-paper.md" in (ROOT / page).read_text()
