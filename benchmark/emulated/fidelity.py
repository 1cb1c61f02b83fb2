"""``decobench fidelity``: the same run on both backends, per-iteration time compared.

For each method the emulated run goes first (real processes, shaped links, measured time).
The simulated run then uses the same configuration with each iteration's compute time T_k
set to what emulated rank 0 measured at that iteration (:func:`measured_compute_times`: its
time not spent waiting for messages), so the comparison tests the network part of the time
model, not this machine's arithmetic speed or its variance (a plan at the bubble-free edge
waits whenever one iteration computes faster than its message crosses); the mean T
(:func:`measured_compute_s`) and the profile's T are reported beside it. Per-iteration
time is measured over a window that skips the first ``warmup`` iterations (connection
set-up and first-touch costs on the emulated side):

    t_iter = (t_K − t_w) / (K − w),   t_k = ``sim_time_s`` of iteration k (end of compute)

and the relative difference is ``(t_iter^emulated − t_iter^simulated) / t_iter^simulated``.
Evaluations are pushed to the last iteration so they do not perturb the measurement.

Adaptive methods choose (δ, τ) from what they measure, and the two backends measure
different things (exact trace values vs real transfers), so the simulated run that checks
the time model replays the emulated run's schedule; a second simulated run with the
method's own decisions is reported beside it (end to end), and its first plan is compared
with the emulated run's. That run sees the emulated run's compute noise as the emulated
planner did: each observation reaches the method when the emulated ranks' next message
would carry it (``report="next-message"`` in :mod:`decobench.training.simulated`), with the T̂
samples the ranks agreed on (:func:`planning_compute_times`); with the run's mean T and
the arrival rule, the first plans differed by the VM's compute noise alone.

The emulated run calibrates the transport before training (``--calibrate-transport``:
:mod:`decobench.emulated.calibrate` fits gloo's latency multiplier, goodput and the
shaper's burst per collective kind and writes ``transport_model.json``, with the link shared
by the run's lanes: :mod:`decobench.clock.link_sharing`). The simulated runs
are charged with that fitted model (``--transport-model``, :mod:`decobench.clock.transport_model`);
the same schedule on the ideal link of docs/design.md §4 is reported beside it, so the table
shows both how far the ideal time model is from the real transport and whether the fitted
model closes the gap. For adaptive methods the first plan (δ, τ) of the emulated run is
compared with the first plan of the simulated run that decides for itself.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from decobench.atomicio import write_text_atomic
from decobench.clock.transport_model import TRANSPORT_MODEL_FILE
from decobench.errors import DecobenchError
from decobench.runs.config import RunConfig
from decobench.runs.rundir import read_metrics
from decobench.runs.runner import PreparedRun

TOLERANCE = 0.10
"""The agreement the issue asks for: within 10%."""


@dataclass(frozen=True)
class FidelityRow:
    """One method's comparison. ``simulated_*`` is the simulated run charged for the schedule
    the emulated run chose (the time-model check); ``planned_*`` the simulated run making its
    own (δ, τ) decisions from its exact measurements (end to end)."""

    method: str
    iterations: int
    warmup: int
    compute_s_measured: float
    compute_s_profile: float | None
    emulated_iteration_s: float
    simulated_iteration_s: float
    relative_difference: float
    within_tolerance: bool
    planned_iteration_s: float
    planned_mean_delta: float
    planned_mean_tau: float
    emulated_mean_delta: float
    simulated_mean_delta: float
    emulated_mean_tau: float
    simulated_mean_tau: float
    emulated_bubble_fraction: float
    simulated_bubble_fraction: float
    emulated_run: str
    simulated_run: str
    ideal_iteration_s: float = float("nan")
    ideal_relative_difference: float = float("nan")
    transport_model: str = "ideal"
    emulated_first_plan: tuple[float, int] | None = None
    planned_first_plan: tuple[float, int] | None = None
    first_plan_within_tolerance: bool | None = None
    network_first_plan: tuple[float, int] | None = None
    """The plan from the emulated run's first â, b̂ and the simulated run's first T̂
    (:func:`network_plan`): the first plans with the compute time's noise taken out."""
    network_plan_within_tolerance: bool | None = None
    emulated_link_drops: int | None = None
    """Packets the emulated links' shapers dropped in the run (each a retransmission, a round
    trip or more, that the time model does not have); None where tc could not be read."""
    emulated_retransmits: int | None = None
    """TCP segments the emulated hosts retransmitted (a drop anywhere, or a loss probe or
    timeout that fired without one); None where the counters could not be read."""


def iteration_time(rows: Sequence[dict[str, Any]], warmup: int) -> float:
    """``(t_K − t_w) / (K − w)`` over the iteration rows (``sim_time_s`` at iteration k)."""
    times = {int(r["iteration"]): float(r["sim_time_s"]) for r in rows if "sim_time_s" in r}
    last = max(times)
    if warmup >= last or warmup not in times:
        if warmup == 0:
            return times[last] / last
        raise DecobenchError(f"fidelity needs more than {warmup} logged iterations "
                             f"(got {last}); raise --max-iters or lower --warmup")
    return (times[last] - times[warmup]) / (last - warmup)


def _mean(rows: Sequence[dict[str, Any]], key: str, warmup: int) -> float:
    values = [float(r[key]) for r in rows if key in r and int(r["iteration"]) > warmup]
    return statistics.fmean(values) if values else float("nan")


def measured_compute_s(rows: Sequence[dict[str, Any]], warmup: int) -> float:
    """The time model's T as rank 0 lived it after the warm-up: its time per iteration not
    spent waiting for messages, ``(t_K − t_w − Σ_{k=w}^{K−1} wait_k) / (K − w)``; the wait
    logged with iteration k is spent before iteration k + 1's compute, between ``t_k`` and
    ``t_{k+1}``.

    T is all a worker does in an iteration but wait: the forward and backward pass,
    compression, decoding and applying updates. The median of ``compute_s`` (before
    2026-11-26) left out the applying and encoding and the slow tail of compute: 40.0 ms
    against 46.5 ms for DeCo-SGD, whose emulated iterations took 47.4 ms, so a compute-bound
    method looked 18.6% slower than the time model."""
    per_iteration = iteration_time(rows, warmup)       # the same window, checked there
    last = max(int(r["iteration"]) for r in rows if "sim_time_s" in r)
    waited = sum(float(r.get("wait_s", 0.0)) for r in rows
                 if warmup <= int(r["iteration"]) < last)
    return max(0.0, per_iteration - waited / (last - warmup))


def measured_compute_times(rows: Sequence[dict[str, Any]]) -> tuple[float, ...]:
    """Rank 0's time not spent waiting in each iteration, for the replay: the row of
    iteration r (1-based, ``sim_time_s`` = t_r at the end of its compute) gives
    ``T_r = t_r − t_{r−1} − wait_{r−1}`` (``t_0 = 0``; the wait logged with iteration r − 1
    is spent between t_{r−1} and t_r, as in :func:`measured_compute_s`), the compute time of
    the clock's iteration r − 1. Every iteration must be logged (``log_every`` 1)."""
    by_iteration = {int(r["iteration"]): r for r in rows if "sim_time_s" in r}
    if not by_iteration:
        return ()
    last = max(by_iteration)
    missing = [r for r in range(1, last + 1) if r not in by_iteration]
    if missing:
        raise DecobenchError(f"fidelity needs a metrics row for every iteration; iteration "
                             f"{missing[0]} has none (log_every must be 1)")
    times, before, waited = [], 0.0, 0.0
    for r in range(1, last + 1):
        row = by_iteration[r]
        t = float(row["sim_time_s"])
        times.append(max(0.0, t - before - waited))
        before, waited = t, float(row.get("wait_s", 0.0))
    return tuple(times)


def planning_compute_times(rows: Sequence[dict[str, Any]]) -> tuple[float, ...]:
    """:func:`measured_compute_times` with T_r replaced by the T̂ sample the emulated ranks
    agreed on for iteration r where one reached them (``reported_work_s`` of the row with
    ``reported_work_iteration`` r: the slowest rank's work, which the emulated planner
    read), for the simulated run that plans for itself: its first plan then reads the same
    T̂. Rank 0's own time is what the time-model check replays (the ranks overlap their
    work when τ > 0, so the slowest per iteration would overstate it)."""
    times = list(measured_compute_times(rows))
    for r in rows:
        if "reported_work_s" in r and "reported_work_iteration" in r:
            i = int(r["reported_work_iteration"]) - 1
            if 0 <= i < len(times):
                times[i] = float(r["reported_work_s"])
    return tuple(times)


def _plan_rows(rows: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The rows that carry a plan (``plan_*`` fields), in iteration order."""
    for row in sorted(rows, key=lambda r: int(r["iteration"])):
        if any(k.startswith("plan_") for k in row):
            yield row


def first_plan(rows: Sequence[dict[str, Any]]) -> tuple[float, int] | None:
    """(δ, τ) of the first row that carries a plan (``plan_*`` fields: an adaptive method's
    first re-plan); None for a method that never plans."""
    return next(((float(row["delta"]), int(row["tau"])) for row in _plan_rows(rows)
                 if "delta" in row and "tau" in row), None)


def _first_plan_row(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first plan's row with its measurements â, b̂, T̂ (None if none has them)."""
    return next((row for row in _plan_rows(rows) if all(
        k in row for k in ("plan_bandwidth_mbps", "plan_latency_ms", "plan_compute_ms"))), None)


def network_plan(emulated: Sequence[dict[str, Any]], planned: Sequence[dict[str, Any]],
                 options: Any, d: int, workers: int,
                 topology: str) -> tuple[float, int] | None:
    """The plan DeCo's planner (docs/design.md §5) makes from the emulated run's first â and b̂
    with the simulated run's first T̂: the first-plan comparison with the compute time taken
    out, so it tests only what the two backends measure of the network. ``options``: the
    method's planner options (None, or a method without them: no plan). ``deco-sgd-robust``
    plans from windows of samples, not from one â and b̂, so it has no such plan either."""
    from decobench.methods.robust import RobustDecoOptions
    from decobench.planning.phi import get_phi
    from decobench.planning.planner import plan

    e, p = _first_plan_row(emulated), _first_plan_row(planned)
    if (e is None or p is None or not hasattr(options, "phi")
            or isinstance(options, RobustDecoOptions)):
        return None
    chosen = plan(d, workers, float(p["plan_compute_ms"]) / 1e3,
                  float(e["plan_bandwidth_mbps"]) * 1e6, float(e["plan_latency_ms"]) / 1e3,
                  topology=topology, phi=get_phi(options.phi), tau_max=options.tau_max,
                  delta_min=options.delta_min, kappa=options.kappa, objective=options.planner)
    return chosen.delta, chosen.staleness


def plans_agree(emulated: tuple[float, int] | None, simulated: tuple[float, int] | None,
                tolerance: float = TOLERANCE) -> bool | None:
    """Both first plans within ``tolerance``: δ relative to the simulated one, τ within
    ``tolerance`` of it (so equal below τ = 10); None when either run did not plan."""
    if emulated is None or simulated is None:
        return None
    (de, te), (ds, ts) = emulated, simulated
    return abs(de - ds) <= tolerance * ds and abs(te - ts) <= tolerance * ts


def compare(method: str, emulated_dir: Path, simulated_dir: Path, planned_dir: Path,
            warmup: int, compute_s_measured: float,
            compute_s_profile: float | None, ideal_dir: Path | None = None,
            transport_model: str = "ideal",
            network_first_plan: tuple[float, int] | None = None) -> FidelityRow:
    emulated, simulated = read_metrics(emulated_dir), read_metrics(simulated_dir)
    planned = read_metrics(planned_dir)
    emu, sim = iteration_time(emulated, warmup), iteration_time(simulated, warmup)
    diff = (emu - sim) / sim
    ideal = iteration_time(read_metrics(ideal_dir), warmup) if ideal_dir else sim
    emulated_plan, planned_plan = first_plan(emulated), first_plan(planned)
    drops, retransmitted = link_counters(emulated_dir)
    return FidelityRow(
        method=method, iterations=max(int(r["iteration"]) for r in emulated), warmup=warmup,
        compute_s_measured=compute_s_measured, compute_s_profile=compute_s_profile,
        emulated_iteration_s=emu, simulated_iteration_s=sim, relative_difference=diff,
        within_tolerance=abs(diff) <= TOLERANCE,
        planned_iteration_s=iteration_time(planned, warmup),
        planned_mean_delta=_mean(planned, "delta", warmup),
        planned_mean_tau=_mean(planned, "tau", warmup),
        emulated_mean_delta=_mean(emulated, "delta", warmup),
        simulated_mean_delta=_mean(simulated, "delta", warmup),
        emulated_mean_tau=_mean(emulated, "tau", warmup),
        simulated_mean_tau=_mean(simulated, "tau", warmup),
        emulated_bubble_fraction=_bubble_fraction(emulated, warmup),
        simulated_bubble_fraction=_bubble_fraction(simulated, warmup),
        emulated_run=str(emulated_dir), simulated_run=str(simulated_dir),
        ideal_iteration_s=ideal, ideal_relative_difference=(emu - ideal) / ideal,
        transport_model=transport_model, emulated_first_plan=emulated_plan,
        planned_first_plan=planned_plan,
        first_plan_within_tolerance=plans_agree(emulated_plan, planned_plan),
        emulated_link_drops=drops, emulated_retransmits=retransmitted,
        network_first_plan=network_first_plan,
        network_plan_within_tolerance=plans_agree(network_first_plan, planned_plan))


def link_counters(run_dir: Path) -> tuple[int | None, int | None]:
    """(shaper drops, TCP segments retransmitted) from the emulated run's
    ``qdisc_stats.json``: both None without the file, the second None for a run from before
    the TCP counters were read."""
    path = Path(run_dir) / "qdisc_stats.json"
    if not path.is_file():
        return None, None
    report = json.loads(path.read_text())
    retransmitted = report.get("retransmitted_segments")
    return (int(report.get("drops", 0)),
            None if retransmitted is None else int(retransmitted))


def _bubble_fraction(rows: Sequence[dict[str, Any]], warmup: int) -> float:
    by_iter = {int(r["iteration"]): r for r in rows}
    last, first = by_iter[max(by_iter)], by_iter.get(warmup)
    span = float(last["sim_time_s"]) - (float(first["sim_time_s"]) if first else 0.0)
    bubble = float(last["bubble_s"]) - (float(first["bubble_s"]) if first else 0.0)
    return bubble / span if span > 0 else 0.0


def _agree(verdict: bool | None) -> str:
    return {None: "-", True: "yes", False: "NO"}[verdict]


def _plan(plan: tuple[float, int] | None) -> str:
    return "-" if plan is None else f"{plan[0]:.4g} / {plan[1]}"


def render_markdown(rows: Sequence[FidelityRow], header: dict[str, Any]) -> str:
    lines = ["# Fidelity: simulated vs emulated per-iteration time", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", "Time model check: the simulated runs replay the (δ, τ) schedule the emulated "
              "run chose, with each iteration's T_k = rank 0's time in that iteration not "
              "spent waiting for messages (compute, compression, decoding, applying; T "
              "measured is their mean), on the ideal link of docs/design.md §4 and with the "
              "transport model fitted on the emulated links (difference and verdict: the "
              "fitted model). Link drops: packets the emulated shapers dropped; "
              "retransmits: TCP segments the emulated hosts sent again (after a drop "
              "anywhere, or a timer that fired); each costs a round trip or more the time "
              "model does not have.", "",
              "| method | T measured (ms) | emulated s/it | simulated s/it, ideal link | "
              "simulated s/it, fitted transport | difference | within 10% | δ̄ | τ̄ | "
              "bubble emu / sim | link drops | retransmits |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.method} | {r.compute_s_measured * 1e3:.1f} | {r.emulated_iteration_s:.4f} | "
            f"{r.ideal_iteration_s:.4f} ({r.ideal_relative_difference * 100:+.1f}%) | "
            f"{r.simulated_iteration_s:.4f} | {r.relative_difference * 100:+.1f}% | "
            f"{'yes' if r.within_tolerance else 'NO'} | {r.emulated_mean_delta:.4g} | "
            f"{r.emulated_mean_tau:.2f} | {r.emulated_bubble_fraction:.2f} / "
            f"{r.simulated_bubble_fraction:.2f} | "
            f"{'-' if r.emulated_link_drops is None else r.emulated_link_drops} | "
            f"{'-' if r.emulated_retransmits is None else r.emulated_retransmits} |")
    lines += ["", "End to end: the simulated run making its own (δ, τ) decisions (fitted "
              "transport), and the first plan (δ / τ) of each side (adaptive methods). The "
              "last two columns plan from the emulated run's first â and b̂ with the "
              "simulated run's first T̂: the network's part of the comparison, without the "
              "compute time's noise.", "",
              "| method | emulated s/it | δ̄ / τ̄ emulated | simulated s/it (own plan) | "
              "δ̄ / τ̄ simulated | first plan emulated | first plan simulated | "
              "within 10% | from emulated â, b̂ and simulated T̂ | within 10% |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.method} | {r.emulated_iteration_s:.4f} | {r.emulated_mean_delta:.4g} / "
            f"{r.emulated_mean_tau:.2f} | {r.planned_iteration_s:.4f} | "
            f"{r.planned_mean_delta:.4g} / {r.planned_mean_tau:.2f} | "
            f"{_plan(r.emulated_first_plan)} | {_plan(r.planned_first_plan)} | "
            f"{_agree(r.first_plan_within_tolerance)} | {_plan(r.network_first_plan)} | "
            f"{_agree(r.network_plan_within_tolerance)} |")
    return "\n".join(lines) + "\n"


def replayed(run: PreparedRun, emulated_rows: Sequence[dict[str, Any]]) -> PreparedRun:
    """``run`` following the emulated run's per-iteration (δ, τ) (``PreparedRun.replay``,
    what ``--replay-schedule`` sets: the loop hands it to :meth:`Method.replay`). A method
    whose decisions never read the network (``MethodSpec.network_decisions`` is
    :func:`~decobench.methods.decisions.network_independent`: D-SGD, Accordion, a static
    pair) makes the same decisions on both backends and is returned unchanged."""
    from decobench.methods.controllers import Schedule
    from decobench.methods.decisions import network_independent

    if run.spec.network_decisions is network_independent:
        return run
    schedules = tuple(Schedule(float(r["delta"]), int(r["tau"]))
                      for r in sorted(emulated_rows, key=lambda r: int(r["iteration"]))
                      if "delta" in r and "tau" in r)
    return dataclasses.replace(run, replay=schedules or None)


def simulated_runs(simulated: dict[str, Any], emulated_rows: Sequence[dict[str, Any]],
                   fitted: str, out: Path, method: str) -> dict[str, PreparedRun]:
    """The three simulated runs of one method (``simulated``: the run configuration's
    fields): ``simulated`` and ``simulated-ideal`` replay the emulated schedule with rank 0's
    T_k (:func:`measured_compute_times`), charged with the fitted transport model and on
    the ideal link; ``simulated-own-plan`` decides for itself with the fitted model, the
    T̂ samples the emulated ranks agreed on (:func:`planning_compute_times`) and the
    emulated ranks' report rule (``report="next-message"``, :mod:`decobench.training.simulated`)."""
    from decobench.runs.runner import prepare

    compute_times = measured_compute_times(emulated_rows)
    planning_times = planning_compute_times(emulated_rows)
    runs = {}
    for name, model, replay in (("simulated", fitted, True), ("simulated-ideal", None, True),
                                ("simulated-own-plan", fitted, False)):
        run = prepare(RunConfig(**{**simulated, "transport_model": model,
                                   "out": str(out / name / method)}))
        if replay:                # the emulated schedule, and rank 0's T_k
            run = dataclasses.replace(replayed(run, emulated_rows), compute_times=compute_times)
        else:                     # its own decisions, from what the emulated ranks observed
            run = dataclasses.replace(run, report="next-message", compute_times=planning_times)
        runs[name] = run
    return runs


def run_fidelity(base: RunConfig, methods: Sequence[str], out: Path, warmup: int,
                 overwrite: bool = False, show_progress: bool = True,
                 launch: Callable[..., dict[str, Any]] | None = None) -> list[FidelityRow]:
    """Both backends for each method; writes ``fidelity.json`` and ``fidelity.md``."""
    from decobench.emulated.launcher import launch as launch_emulated
    from decobench.runs.runner import execute, prepare

    launch = launch or launch_emulated
    if base.max_iters is None or base.max_iters <= warmup:
        raise DecobenchError(f"--max-iters must exceed --warmup ({warmup})")
    rows: list[FidelityRow] = []
    header: dict[str, Any] = {}
    for method in methods:
        common = base.model_dump(exclude_unset=True)
        common.update(method=method, target=None, eval_every=base.max_iters,
                      topology=base.topology, label=None, condition=None)
        common.pop("compute_time_s", None)
        emulated = RunConfig(**{**common, "backend": "emulated",
                                "calibrate_transport": True,
                                "out": str(out / "emulated" / method)})
        prepared = prepare(emulated)
        summary = launch(prepared, overwrite=overwrite, show_progress=show_progress,
                         wandb=False)
        emu_dir = Path(prepared.out)
        emu_rows = read_metrics(emu_dir)
        fitted = str(emu_dir / TRANSPORT_MODEL_FILE)
        t_measured = measured_compute_s(emu_rows, warmup)
        simulated = {**common, "backend": "simulated", "compute_time_s": t_measured}
        runs = {}
        for name, run in simulated_runs(simulated, emu_rows, fitted, out, method).items():
            execute(run, overwrite=overwrite, show_progress=show_progress)
            runs[name] = Path(run.out)
        d = int(summary.get("parameters", 0))
        net_plan = (network_plan(emu_rows, read_metrics(runs["simulated-own-plan"]),
                                 prepared.options, d, base.workers, emulated.topology)
                    if d > 0 else None)
        rows.append(compare(method, emu_dir, runs["simulated"], runs["simulated-own-plan"],
                            warmup, t_measured, prepared.profile.compute_time_s,
                            ideal_dir=runs["simulated-ideal"], transport_model=fitted,
                            network_first_plan=net_plan))
        header = {"task": base.task, "profile": base.profile, "workers": base.workers,
                  "network": base.trace or base.regime, "topology": emulated.topology,
                  "max_iters": base.max_iters, "warmup_iterations": warmup,
                  "latency_mechanism": summary.get("latency_mechanism"),
                  "process_group": summary.get("process_group")}
    payload = {"header": header, "tolerance": TOLERANCE, "rows": [asdict(r) for r in rows]}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "fidelity.json", json.dumps(payload, indent=2) + "\n")
    write_text_atomic(out / "fidelity.md", render_markdown(rows, header))
    return rows
