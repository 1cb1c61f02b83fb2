"""What the property tests of the edge (test_edge.py, test_sweep_property.py) accept as the
outcome of a generated command: a sane finished run, or one error line and nothing written."""

import math
from pathlib import Path


def assert_sane_summary(summary: dict) -> None:
    """A finished run's summary: finite simulated time, at least one iteration, a status."""
    assert math.isfinite(summary["sim_time_s"]) and summary["iterations"] >= 1
    assert summary["status"] in {"finished", "budget_exhausted", "diverged"}


def assert_one_line_error(code: int, err: str, out: Path) -> None:
    """Exit 2, one ``decobench: error:`` line on stderr, and ``out`` never created."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("decobench: error: "), err
    assert not out.exists()
