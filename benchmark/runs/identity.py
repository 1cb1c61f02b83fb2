"""A run's identity: what it computes, as one hash (docs/design.md §9.3).

Two runs with one identity compute the same thing: a sweep names its cells by it and resumes
a cell only while it is unchanged, and a checkpoint refuses a run of another identity. Paths
that change nothing count by content (a trace file) or not at all (``out``, ``data_root``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from decobench.runs.config import FLAT_EMULATION_FIELDS, EmulationConfig, RunConfig

IDENTITY_EXCLUDED = ("out", "data_root", "checkpoint_every_s")
"""RunConfig fields that do not change what a run computes: left out of its identity."""

ADDED_LATER: tuple[str, ...] = ("fine_eval_every", "fine_eval_margin", "milestones",
                                 "ratio_shape", "init", "replay_schedule",
                                 "gradient_engine", "transport_model", "device",
                                 "matmul_precision", "ttt_resolution", "topk_scope",
                                 "ef_units", "clip_norm", "step_bound", "momentum_correction",
                                 "divergence_loss", "divergence_window", "autocast")
"""RunConfig fields added after sweeps were first published: left out of a run's identity
while they hold their default, so finished sweeps keep their identities (a run that sets one
of them gets a new identity, as it computes something else)."""


EMULATION_ADDED_LATER: tuple[str, ...] = ("packet_loss", "collectives_in_flight",
                                           "calibrate_transport")
"""Emulation settings added after emulated runs were first made: left out of an emulated
run's identity while they hold their default."""


def identity(config: RunConfig) -> str:
    """SHA-256 of the resolved config without paths that do not change the computation
    (:data:`IDENTITY_EXCLUDED`); a trace file counts by its content, not its path."""
    from decobench.netem.trace import resolve_trace_path

    values = config.model_dump(exclude=set(IDENTITY_EXCLUDED))
    emulation = values.pop("emulation")
    if config.backend != "simulated":
        # the emulated settings count flat, under their flag names, as before they were
        # nested (RunConfig.emulation), so identities do not change
        values.update({flat: emulation[name] for flat, name in FLAT_EMULATION_FIELDS.items()
                       if not (flat in EMULATION_ADDED_LATER and emulation[name] ==
                               EmulationConfig.model_fields[name].get_default())})
    # on the simulated backend they change nothing, and leaving them out keeps the
    # identities of runs made before the emulated backend existed
    for key in ADDED_LATER:
        if values.get(key) == RunConfig.model_fields[key].get_default(
                call_default_factory=True):
            values.pop(key, None)
    for field in ("trace", "ratio_shape"):
        path = getattr(config, field)
        if path is not None:
            values[field] = hashlib.sha256(resolve_trace_path(path).read_bytes()).hexdigest()
    if config.regime is not None:
        # a regime on a trace file (a per-seed realisation) counts by the file's content;
        # one on a bundled name keeps its text, as before realisations existed
        from decobench.clock.regime import parse_regime
        from decobench.netem.trace import list_bundled_traces

        profile, trace = parse_regime(config.regime)
        if trace not in list_bundled_traces() and Path(trace).is_file():
            digest = hashlib.sha256(Path(trace).read_bytes()).hexdigest()
            values["regime"] = f"{profile}:{digest}"
    if config.transport_model == "ideal":           # the same clock as no model at all
        values.pop("transport_model", None)
    elif config.transport_model is not None:       # a model counts by its numbers
        from decobench.clock.transport_model import load_transport_model

        values["transport_model"] = load_transport_model(config.transport_model).to_dict()
    if config.replay_schedule is not None:
        from decobench.runs.replay import metrics_path

        values["replay_schedule"] = hashlib.sha256(
            metrics_path(config.replay_schedule).read_bytes()).hexdigest()
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
