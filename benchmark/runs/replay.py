"""Recorded (δ, τ) schedules: ``--replay-schedule`` makes a run follow an earlier run's
decisions (:meth:`decobench.methods.Method.replay`), so two runs can be compared under the
same decisions, e.g. the emulated backend against the simulated one for an adaptive method
whose decisions depend on the network it measures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from decobench.errors import DecobenchError
from decobench.methods.controllers import Schedule
from decobench.runs.rundir import METRICS


def metrics_path(path: str | Path) -> Path:
    """``path`` itself, or ``path/metrics.jsonl`` for a run directory; must exist."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    if not path.is_file():
        raise DecobenchError(f"--replay-schedule {path}: no such file (give a run's "
                             "metrics.jsonl or its run directory)")
    return path


def load_schedule(path: str | Path) -> tuple[Schedule, ...]:
    """The (δ_t, τ_t) of iterations 1, 2, ... of a metrics.jsonl logged every iteration."""
    file = metrics_path(path)
    schedules: list[Schedule] = []
    try:
        lines = file.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DecobenchError(f"--replay-schedule {file}: cannot read it ({exc})") from exc
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DecobenchError(f"--replay-schedule {file}: line {number} is not JSON") from exc
        if "delta" not in row or "tau" not in row:
            continue                                  # e.g. a diverged row
        if row.get("iteration") != len(schedules) + 1:
            raise DecobenchError(
                f"--replay-schedule {file}: line {number} is iteration {row.get('iteration')}, "
                f"expected {len(schedules) + 1}; the run must log every iteration "
                "(--log-every 1)")
        delta, tau = row["delta"], row["tau"]
        if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 < delta <= 1
                and isinstance(tau, int) and tau >= 0):
            raise DecobenchError(f"--replay-schedule {file}: line {number} has δ {delta!r}, "
                                 f"τ {tau!r}; expected 0 < δ <= 1 and an integer τ >= 0")
        schedules.append(Schedule(float(delta), tau))
    if not schedules:
        raise DecobenchError(f"--replay-schedule {file}: no rows with delta and tau")
    return tuple(schedules)
