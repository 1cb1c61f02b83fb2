"""Backends: where a prepared run trains, found through one registry.

A :class:`Backend` checks a prepared run before anything is created (one line naming what to
fix) and runs it to a run directory, returning its summary. The shipped ones register
through the ``decobench.backends`` entry points (``pyproject.toml``), like methods and tasks:

- ``simulated`` (:data:`decobench.runs.runner.SIMULATED`): n workers in one process on the event
  clock; a sweep runs several cells at once;
- ``emulated`` (:data:`decobench.emulated.launcher.EMULATED`): n worker processes over links
  shaped live from the trace, times measured; its settings are ``RunConfig.emulation``
  (:class:`decobench.runs.config.EmulationConfig`); a sweep runs its cells one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from decobench.registry import Registry

BACKENDS_GROUP = "decobench.backends"


@dataclass(frozen=True)
class Backend:
    """``check(run)`` raises a one-line :class:`~decobench.errors.DecobenchError` when the
    backend cannot run ``run`` here; ``run(run, overwrite=, show_progress=, wandb=)`` trains
    it and returns its summary; ``parallel_cells``: a sweep may run several cells at once."""

    name: str
    summary: str
    check: Callable[[Any], None]
    run: Callable[..., dict[str, Any]]
    parallel_cells: bool = True


def _backend_name(obj: object) -> str:
    if not isinstance(obj, Backend):
        raise TypeError(f"expected a decobench.runs.backends.Backend, got {type(obj).__name__}")
    return obj.name


BACKENDS: Registry[Backend] = Registry(BACKENDS_GROUP, "backend", _backend_name)


def get_backend(name: str) -> Backend:
    return BACKENDS.get(name)
