"""One training run on the simulated clock (``decobench run``).

:func:`prepare` resolves and checks everything a run needs (task, profile, method options,
trace, data, run directory) and raises a one-line :class:`DecobenchError` on bad input
before any training; :func:`execute` then trains n workers in one process: the training
loop of :mod:`decobench.training.loop` over the :class:`~decobench.training.simulated.SimulatedTransport`
(the event clock of docs/design.md §4.2), and writes the run directory.
"""

from __future__ import annotations

import functools
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from decobench import __version__
from decobench.clock.regime import NetworkCondition, parse_regime
from decobench.clock.transport_model import IDEAL, TransportModel, load_transport_model
from decobench.errors import DecobenchError
from decobench.methods import MethodOptions, MethodSpec, get_method_spec
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.rules import RULE_FLAGS, UpdateRules
from decobench.netem.trace import (
    Trace,
    load_trace,
    resolve_trace_path,
    trace_header_fields,
)
from decobench.planning.estimators import NetworkEstimate
from decobench.runs.backends import Backend, get_backend
from decobench.runs.checkpoint import Checkpointer, RefineStarts, load_checkpoint, wall_start_for
from decobench.runs.config import RunConfig, format_validation_error
from decobench.runs.identity import identity
from decobench.runs.lifecycle import RunRecord
from decobench.runs.replay import load_schedule
from decobench.runs.rundir import CHECKPOINT
from decobench.runs.tracking import TrackerFactory
from decobench.runs.trajectory import (
    TRAJECTORY,
    RecordedLearner,
    RecordingLearner,
    Reuse,
    Trajectory,
    decision_policy,
)
from decobench.tasks import Task, TaskData, TaskProfile, get_task
from decobench.tasks.base import parameter_count
from decobench.training.devices import resolve_device
from decobench.training.evaluation import (
    EvaluationSchedule,
    TargetBook,
    hit_fields,
    milestone_records,
    refine_windows,
)
from decobench.training.loop import Learner, ModelLearner, Outcome, train
from decobench.training.sharding import check_batch_size
from decobench.training.simulated import SimulatedTransport


@dataclass(frozen=True)
class PreparedRun:
    """Everything checked and resolved; nothing trained yet."""

    config: RunConfig
    task: Task
    profile: TaskProfile
    spec: MethodSpec
    options: MethodOptions
    condition: NetworkCondition
    trace_path: Path | None
    out: Path
    max_iters: int
    compute_time_s: float | None
    compute_time_source: str
    eval_every: int
    batch_size: int
    optimizer: OptimizerConfig
    data_root: Path | None
    download: bool
    dataset: str | None
    replay: tuple[Any, ...] | None = None
    transport: TransportModel = IDEAL
    rules: UpdateRules = UpdateRules()
    """The update rules of docs/design.md §2.5, resolved (:func:`update_rules`)."""
    compute_times: tuple[float, ...] | None = None
    """Simulated: T_k of iteration k (from ``compute_times[k]``; ``compute_time_s`` beyond
    its end) instead of one T: ``decobench fidelity`` replays the emulated rank's measured
    times (:func:`decobench.emulated.fidelity.measured_compute_times`)."""
    report: str = "arrival"
    """Simulated: when an observation reaches the method (:data:`decobench.training.simulated.REPORTS`;
    ``decobench fidelity`` mirrors the emulated ranks' reports with ``next-message``)."""

    def condition_means(self, d: int) -> NetworkEstimate | None:
        """The network's means as the run's model sees its trace, and T (for methods
        planned ahead from the condition, ``MethodContext.condition``); None when T is
        measured (then the condition is not known before the run)."""
        if self.compute_time_s is None:
            return None
        trace = self.condition.trace_for(d, self.compute_time_s)
        return NetworkEstimate(trace.mean_bandwidth_bps(), trace.mean_latency_s(),
                              self.compute_time_s)


def label_of(config: RunConfig) -> str:
    """The method variant's name in reports and W&B: ``label``, else the method."""
    return config.label or config.method


def condition_of(config: RunConfig) -> str:
    """The network condition's name: ``condition``, else the trace's file stem, the regime,
    or the ratios (``rho4.6-lambda1``)."""
    if config.condition is not None:
        return config.condition
    if config.trace is not None:
        return Path(config.trace).stem
    if config.regime is not None:
        return config.regime.replace(":", "-").replace("/", "-")
    return f"rho{config.transmission_ratio:g}-lambda{config.latency_ratio:g}"


def default_out(config: RunConfig) -> Path:
    return (Path("runs") / f"{config.task}__{label_of(config)}__"
            f"{condition_of(config)}__{config.profile}"
            f"__n{config.workers}__s{config.seed}")


def prepare(config: RunConfig) -> PreparedRun:
    """Resolve and validate a run; raises DecobenchError with one clear line on bad input."""
    get_backend(config.backend)
    task = get_task(config.task)
    profile = task.profile(config.profile)
    spec = get_method_spec(config.method)
    try:
        options = spec.options(**config.method_options)
    except ValidationError as exc:
        allowed = ", ".join("--" + f.replace("_", "-") for f in spec.options.model_fields) or "none"
        raise DecobenchError(format_validation_error(
            exc, f"invalid option for method {spec.name} (its options: {allowed}): ")) from exc
    targets = ([("--target", config.target)] if config.target is not None else []) + [
        ("--milestone", m) for m in config.milestones]
    for flag, value in targets:
        try:
            task.validate_target(value)
        except DecobenchError as exc:
            raise DecobenchError(f"{flag} {exc}") from None
    condition, trace_path = network_condition(config, task)
    compute_time_s = _fixed_compute_time(config, profile)
    if condition.kind != "trace" and compute_time_s is None:
        raise DecobenchError(f"{condition.label!r} is relative to the compute time T, so T "
                             "must be fixed: drop --compute-time measured or give --trace")
    data_root = Path(config.data_root) if config.data_root else None
    if data_root is not None and "=" in config.data_root and not data_root.exists():
        folder = config.data_root.partition("=")[2]
        raise DecobenchError(f"--data-root {config.data_root}: a run takes the folder alone "
                             f"(--data-root {folder}); TASK=DIR is the form of `decobench "
                             "sweep`, which gives each task its own")
    download = data_root is None
    variant = task.dataset_variant(config.dataset)
    task.check_data(data_root, download, variant)
    task.select_init(config.init, profile)      # --init: checked; build_seeded_model follows it
    if config.backend == "simulated":
        resolve_device(config.device)            # a GPU asked for where there is none
    optimizer = OptimizerConfig(
        lr=config.lr if config.lr is not None else profile.lr,
        momentum=config.momentum if config.momentum is not None else profile.momentum,
        weight_decay=(config.weight_decay if config.weight_decay is not None
                      else profile.weight_decay),
        schedule=config.schedule or profile.schedule,
        warmup_iters=(config.warmup_iters if config.warmup_iters is not None
                      else profile.warmup_iters),
        total_iters=config.max_iters or profile.max_iters)
    rules = update_rules(config, profile, spec, optimizer)
    eval_every = config.eval_every or profile.eval_every
    if config.fine_eval_every is not None and config.fine_eval_every >= eval_every:
        raise DecobenchError(f"--fine-eval-every {config.fine_eval_every} must be smaller "
                             f"than --eval-every ({eval_every}) to make evaluations finer")
    return PreparedRun(
        config=config, task=task, profile=profile, spec=spec, options=options,
        condition=condition, trace_path=trace_path, out=Path(config.out) if config.out else default_out(config),
        max_iters=config.max_iters or profile.max_iters,
        compute_time_s=compute_time_s,
        compute_time_source=_compute_time_source(config, profile),
        eval_every=eval_every,
        batch_size=config.batch_size or profile.batch_size,
        optimizer=optimizer, rules=rules, data_root=data_root, download=download,
        dataset=variant,
        replay=None if config.replay_schedule is None else load_schedule(config.replay_schedule),
        transport=_transport_model(config))


def update_rules(config: RunConfig, profile: TaskProfile, spec: MethodSpec,
                 optimizer: OptimizerConfig) -> UpdateRules:
    """The run's update rules (docs/design.md §2.5): the profile's, with the flags given
    over them; refused in one line when the method does not implement a changed rule or
    momentum correction has no momentum to move."""
    values = profile.rules.model_dump()
    for name in ("topk_scope", "ef_units", "step_bound"):
        if getattr(config, name) is not None:
            values[name] = getattr(config, name)
    if config.clip_norm is not None:
        values["clip_norm"] = config.clip_norm or None       # 0 turns clipping off
    if config.momentum_correction is not None:
        values["momentum_correction"] = config.momentum_correction == "on"
    rules = UpdateRules(**values)
    missing = [name for name in rules.changed() if name not in spec.rules]
    if missing:
        flags = ", ".join(RULE_FLAGS[name] for name in missing)
        raise DecobenchError(f"{flags}: method {spec.name} does not implement this update rule "
                             "(docs/design.md §2.5); drop the flag, or give the paper's "
                             "value, for this method")
    if rules.momentum_correction and not optimizer.momentum:
        raise DecobenchError("--momentum-correction on moves momentum μ onto the workers, and "
                             "this run's μ is 0: give --momentum, e.g. 0.9")
    return rules


def _transport_model(config: RunConfig) -> TransportModel:
    """The simulated clock's transport model (``--transport-model``); the emulated backend
    has the real one and refuses a model."""
    if config.transport_model in (None, "ideal"):
        return IDEAL
    if config.backend != "simulated":
        raise DecobenchError("--transport-model is for the simulated backend: the emulated "
                             "backend runs the real transport")
    return load_transport_model(config.transport_model)


def network_condition(config: RunConfig, task: Task) -> tuple[NetworkCondition, Path | None]:
    """The network as given (trace, regime or ratios), checked before training."""
    if config.trace is not None:
        path = resolve_trace_path(config.trace)
        trace = load_trace(path, loop=config.trace_loop)
        return NetworkCondition("trace", trace=trace, label=trace.name or path.stem), path
    if config.regime is not None:
        reference_name, trace_name = parse_regime(config.regime)
        reference = task.profile(reference_name)
        path = resolve_trace_path(trace_name)
        trace = load_trace(path, loop=config.trace_loop)
        return NetworkCondition(
            "regime", trace=trace, reference_profile=reference.name,
            reference_d=parameter_count(task, reference),
            reference_compute_s=reference.compute_time_s,
            label=f"{config.regime} as seen by profile {config.profile}"), path
    assert config.transmission_ratio is not None and config.latency_ratio is not None
    label = f"S/(aT)={config.transmission_ratio:g}, b/T={config.latency_ratio:g}"
    if config.ratio_shape is None:
        return NetworkCondition("ratios", transmission=config.transmission_ratio,
                                latency=config.latency_ratio, label=label), None
    path = resolve_trace_path(config.ratio_shape)
    shape = load_trace(path, loop=config.trace_loop)
    return NetworkCondition(
        "ratios", trace=shape, transmission=config.transmission_ratio,
        latency=config.latency_ratio, reference_profile="paper",
        reference_compute_s=task.profile("paper").compute_time_s,
        label=f"{label}, shaped like {shape.name or path.stem}"), path


def _fixed_compute_time(config: RunConfig, profile: TaskProfile) -> float | None:
    """T in seconds when it is fixed (profile or override); None when measured."""
    if config.compute_time == "measured":
        if config.compute_time_s is not None:
            raise DecobenchError("--compute-time measured and --compute-time-s exclude each other")
        return None
    return config.compute_time_s if config.compute_time_s is not None else profile.compute_time_s


def _compute_time_source(config: RunConfig, profile: TaskProfile) -> str:
    if config.compute_time == "measured":
        return ("measured: vectorised gradient + method step wall time / n on the machine "
                "that ran the simulation")
    if config.compute_time_s is not None:
        return "given by the user (--compute-time-s)"
    return profile.compute_time_source


def _git_commit() -> str | None:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it (the run's
    code is then not exactly that commit's)."""
    try:
        where = Path(__file__).parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where,
                             capture_output=True, text=True, timeout=5, check=True)
        commit = out.stdout.strip()
        if not commit:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=where, capture_output=True, text=True, timeout=5)
        return commit + ("+dirty" if status.returncode == 0 and status.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _installed(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _torchvision_version() -> str | None:
    """``torchvision.__version__`` (with its build tag, e.g. ``0.29.1+cu130``, which the
    package metadata leaves out) without importing torchvision where a run did not: the
    import costs 1.4-2 s (it imports torch._dynamo). Read from its ``version.py``."""
    import importlib.util
    import re

    module = sys.modules.get("torchvision")
    if module is not None:
        return str(module.__version__)
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "version.py"
        found = re.search(r"""^__version__ = ['"]([^'"]+)['"]""",
                          path.read_text() if path.is_file() else "", re.MULTILINE)
        if found:
            return found.group(1)
    return _installed("torchvision")


def versions() -> dict[str, Any]:
    """What the run was computed with: the libraries whose versions can change its numbers,
    the machine and the vector unit torch uses on it (``cpu_capability``, e.g. AVX2 or
    AVX512: another one can round differently), for ``decobench compare``'s exact mode."""
    return {"decobench": __version__, "python": platform.python_version(),
            "torch": str(torch.__version__), "torchvision": _torchvision_version(),
            "numpy": _installed("numpy"), "timm": _installed("timm"),
            "transformers": _installed("transformers"),
            "git_commit": _git_commit(), "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}


def resolved_config(run: PreparedRun, d: int, data: TaskData,
                    trace: Trace, gradients: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fully resolved configuration written to ``config.yaml`` (``gradients``: the
    per-worker gradient engine and why, :meth:`decobench.training.gradients.WorkerGradients.select`;
    ``data_kind``: full, slice or stand-in, :meth:`decobench.tasks.base.Task.data_kind`)."""
    config = run.config.model_dump()
    config.update(
        method_options=run.options.model_dump(), out=run.config.out or str(run.out), max_iters=run.max_iters,
        eval_every=run.eval_every, batch_size=run.batch_size, lr=run.optimizer.lr,
        momentum=run.optimizer.momentum, weight_decay=run.optimizer.weight_decay,
        schedule=run.optimizer.schedule, warmup_iters=run.optimizer.warmup_iters,
        trace_path=None if run.trace_path is None else str(run.trace_path),
        trace_name=trace.name, network=run.condition.describe(d, run.compute_time_s),
        label=label_of(run.config), condition=condition_of(run.config),
        dataset=run.dataset,
        data_source=data.source, data_kind=run.task.data_kind(data),
        train_examples=data.num_train, parameters=d, metric_name=run.task.metric_name,
        compute_time_s=run.compute_time_s, compute_time_source=run.compute_time_source,
        versions=versions())
    realised = _realisation_of(run.trace_path)
    if realised is not None:
        config["trace_realisation"] = realised
    if gradients is not None:
        config["gradients"] = gradients
    if not run.transport.ideal:
        config["transport"] = run.transport.to_dict()
    if run.compute_times is not None:
        config["compute_times"] = {"iterations": len(run.compute_times),
                                   "mean_s": sum(run.compute_times) / max(1, len(run.compute_times)),
                                   "source": "replayed per iteration (decobench fidelity)"}
    if run.report != "arrival":
        config["report"] = run.report
    if run.rules.changed():
        config["update_rules"] = run.rules.model_dump()
    return config


def _realisation_of(trace_path: Path | None) -> str | None:
    """The ``# realisation:`` line of a per-seed trace file (docs/traces.md
    "Realisations"): which draw of which recipe, with its seed; ``None`` for other traces."""
    if trace_path is None:
        return None
    try:
        fields = trace_header_fields(trace_path.read_text(encoding="utf-8"), "realisation")
    except (OSError, UnicodeDecodeError):
        return None
    return fields[0] if fields else None


def load_task_data(run: PreparedRun) -> TaskData:
    try:
        return run.task.load_data(run.data_root, run.download, run.profile, run.dataset)
    except DecobenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - a data set's reader, whatever it raises
        where = f" from {run.data_root}" if run.data_root else ""
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DecobenchError(f"could not load data for task {run.task.name}{where}: "
                             f"{detail}; check the files (or omit --data-root to download "
                             "the data set)") from exc


def execute(run: PreparedRun, overwrite: bool = False, show_progress: bool = True,
            tracker_factory: TrackerFactory | None = None,
            resume: bool = False, reuse: Reuse | None = None) -> dict[str, Any]:
    """Train and write the run directory; returns the summary.

    ``tracker_factory(resolved_config, run_dir)`` opens a :class:`RunTracker` (e.g. W&B)
    that receives every metrics row and the summary; default: no tracking.

    ``reuse`` (:mod:`decobench.runs.trajectory`): with a ``source`` run directory, re-time that
    run's recorded trajectory on this run's network instead of training (no checkpoints: it
    is quick); without one, train and record the trajectory in ``RUN_DIR/trajectory.pt``.
    ``config.yaml`` and ``summary.json`` say which (``trajectory``, ``retimed_from``).

    **Refine pass.** A target first met at an evaluation whose bracket is wider than the fine
    cadence ``E_f`` (the metric jumped past the fine window between two evaluations) is
    bracketed again by replaying the run, evaluating every ``E_f`` iterations inside that
    bracket (:func:`decobench.training.evaluation.refine_windows`). The replay starts from the first
    pass's state at the evaluation opening the first such bracket, kept in memory
    (:class:`decobench.runs.checkpoint.RefineStarts`; its rows up to there are kept), and from
    the start when there is none (a re-timed run, or a first pass resumed from a checkpoint
    taken after that evaluation). The simulated run is
    deterministic and evaluations do not touch its trajectory, so the replay trains the same
    model; the replay's metric at the first pass's hit must equal the first pass's, or the run
    fails. ``metrics.jsonl`` then holds the replay, ``wall_time_s`` both passes, and
    ``refined_targets`` the targets bracketed again. The tracker sees the first pass's rows.
    """
    config = run.config
    if config.backend != "simulated":
        raise DecobenchError(f"execute() runs the simulated backend; backend {config.backend} "
                             "runs through decobench.emulated.launcher.launch")
    data = load_task_data(run)
    check_batch_size(data.num_train, config.workers, run.batch_size)
    retime = reuse is not None and reuse.source is not None
    checkpoint = (None if retime else Checkpointer(run.out / CHECKPOINT,
                                                  config.checkpoint_every_s, identity(config)))
    state = (load_checkpoint(checkpoint.path, checkpoint.fingerprint)
             if resume and checkpoint is not None else None)
    if reuse is not None and state is not None and "trajectory" not in state["learner"]:
        print(f"{run.out}: its checkpoint was saved without recording the trajectory, so "
              "this run does not record it", file=sys.stderr)
        reuse = None
    recorded = None if reuse is None else reuse.trajectory()
    learner_for = _learner_factory(run, data, reuse, recorded)
    # nothing is written before this line
    record = RunRecord(run.out, "simulated", tracker_factory)
    record.open(resume_after=None if state is None else state["iteration"], overwrite=overwrite)
    if state is not None:
        print(f"resuming {run.out} after iteration {state['iteration']} (its checkpoint)",
              file=sys.stderr)
    wall_start = wall_start_for(state)

    def begin(d: int, trace: Trace, gradients: dict[str, Any]) -> None:
        resolved = resolved_config(run, d, data, trace, gradients)
        if reuse is not None:
            resolved["trajectory"] = reuse.describe(run.out)
        record.begin(resolved, None if run.condition.kind == "trace" else trace,
                     run.condition.label)

    evaluations, _ = evaluation_plan(run)
    # a re-timed run replays from the start: its decision policy's state is not saved
    resolution = evaluations.resolution
    starts = RefineStarts(resolution) if resolution.active and not retime else None
    try:
        first = _train_pass(run, data, evaluations, record.log, wall_start, show_progress,
                            begin, checkpoint=checkpoint, resume=state,
                            learner_for=learner_for, refine_starts=starts)
        result, refined = first, []
        windows = refine_windows(first.book, resolution)
        if windows and first.outcome.status != "diverged":
            start = None if starts is None else starts.state_at(windows[0][0])
            # keep the first pass's rows up to the start; the tracker saw the first pass
            record.restart_metrics(None if start is None else start["iteration"])
            del starts
            result = _train_pass(run, data, evaluations.with_windows(windows),
                                 functools.partial(record.log, track=False), wall_start,
                                 show_progress, None, resume=start, learner_for=learner_for)
            _check_replay(first, result)
            brackets = {(lo, hi) for lo, hi, _ in windows}
            refined = sorted(t for t, hit in first.book.hits.items()
                             if (hit.previous_iteration, hit.iteration) in brackets)
    except BaseException as exc:
        record.fail(exc)
        raise
    summary = summary_fields(run, result.outcome, result.d, time.perf_counter() - wall_start,
                             result.trace, **result.transport.totals(), time_basis="simulated",
                             book=result.book)
    summary["refined_targets"] = refined
    summary["retimed_from"] = reuse.describe(run.out)["retimed_from"] if retime else None
    if recorded is not None and not retime:
        recorded.save(run.out / TRAJECTORY)
    record.finish(summary)
    if checkpoint is not None:
        checkpoint.remove()
    return summary


def _learner_factory(run: PreparedRun, data: TaskData, reuse: Reuse | None,
                     recorded: Trajectory | None) -> Callable[[SimulatedTransport], Learner] | None:
    """How each training pass gets its model side: trained (None: the loop's default),
    trained and recorded into ``recorded``, or played back from it."""
    if reuse is None or recorded is None:
        return None
    if reuse.source is None:
        return lambda transport: RecordingLearner(
            ModelLearner(run, data, transport.rows, transport.device), recorded)
    policy_for = functools.partial(decision_policy, run, recorded.d)

    def played_back(transport: SimulatedTransport) -> Learner:
        policy = policy_for()                # a fresh policy per pass: it has state
        if policy is None:
            raise DecobenchError(f"method {run.spec.name} does not declare its network "
                                 "decisions, so its runs cannot be re-timed")
        return RecordedLearner(recorded, policy, str(reuse.source),
                               own_log=run.spec.learner is not None)
    return played_back


@dataclass
class _Pass:
    """One training pass of a simulated run."""

    outcome: Outcome
    book: TargetBook
    transport: SimulatedTransport
    trace: Trace
    d: int
    metrics_at: dict[int, float]


def _check_replay(first: _Pass, replay: _Pass) -> None:
    """The refine pass must train the same model: same metric at the first pass's
    evaluations that the replay also made, and the same targets met."""
    common = sorted(set(first.metrics_at) & set(replay.metrics_at))
    for it in common:
        if first.metrics_at[it] != replay.metrics_at[it]:
            raise DecobenchError(
                f"refine pass diverged from the first pass at iteration {it}: metric "
                f"{first.metrics_at[it]!r} then {replay.metrics_at[it]!r} (the run is not "
                "deterministic; report this as a bug)")
    if set(first.book.hits) != set(replay.book.hits):
        raise DecobenchError("refine pass met different targets than the first pass "
                             "(the run is not deterministic; report this as a bug)")


def _train_pass(run: PreparedRun, data: TaskData, evaluations: EvaluationSchedule,
                log: Any, wall_start: float, show_progress: bool, begin: Any,
                checkpoint: Checkpointer | None = None,
                resume: dict[str, Any] | None = None,
                learner_for: Callable[[SimulatedTransport], Learner] | None = None,
                refine_starts: RefineStarts | None = None) -> _Pass:
    """Build the model, method and clock from the seed and train once (one pass)."""
    config = run.config

    @functools.cache
    def trace_for(d: int) -> Trace:                 # begin() and the transport share it
        return run.condition.trace_for(d, run.compute_time_s)

    transport = SimulatedTransport(trace_for, config.topology, config.workers,
                                   run.compute_time_s, run.transport,
                                   device=resolve_device(config.device),
                                   compute_times=run.compute_times, report=run.report)
    _, book = evaluation_plan(run)
    trained = train(run, data, transport, evaluations, book, log, wall_start=wall_start,
                    show_progress=show_progress,
                    begin=None if begin is None else (lambda d, g: begin(d, trace_for(d), g)),
                    checkpoint=checkpoint, resume=resume,
                    learner=None if learner_for is None else learner_for(transport),
                    refine_starts=refine_starts)
    return _Pass(trained.outcome, trained.book, transport, transport.trace, trained.d,
                 trained.metrics_at)


def evaluation_plan(run: PreparedRun) -> tuple[EvaluationSchedule, TargetBook]:
    """When the run evaluates, and the book of its targets (stop target and milestones)."""
    config = run.config
    targets = tuple(dict.fromkeys(
        ([config.target] if config.target is not None else []) + list(config.milestones)))
    return (EvaluationSchedule(run.eval_every, config.fine_eval_every, config.fine_eval_margin,
                               share=config.ttt_resolution),
            TargetBook(targets, run.task.higher_is_better))


def summary_fields(run: PreparedRun, outcome: Outcome, d: int, wall_s: float, trace: Trace, *,
                   sim_time_s: float, bubble_s: float, bubble_fraction: float,
                   time_basis: str, book: TargetBook) -> dict[str, Any]:
    """``summary.json`` of a run (docs/design.md §9.3); ``sim_time_s`` is the simulated clock, or
    the measured training time on the emulated backend (``time_basis`` says which)."""
    config = run.config
    return {
        "task": config.task, "method": config.method, "workers": config.workers,
        "trace": trace.name, "trace_path": None if run.trace_path is None else str(run.trace_path),
        "network": run.condition.kind,
        "seed": config.seed, "target": config.target, "metric_name": run.task.metric_name,
        "reached": outcome.reached, "time_to_target_s": outcome.time_to_target_s,
        "iters_to_target": outcome.iters_to_target, "final_metric": outcome.final_metric,
        "iterations": outcome.iterations, "sim_time_s": sim_time_s,
        "bits_sent": outcome.bits_sent, "diverged": outcome.status == "diverged",
        "diverged_at_iteration": outcome.diverged_at_iteration, "backend": config.backend,
        "status": outcome.status, "eval_every": run.eval_every, "profile": run.profile.name,
        "compute_time": config.compute_time, "compute_time_s": run.compute_time_s,
        "topology": config.topology, "parameters": d,
        "label": label_of(config), "condition": condition_of(config),
        "suite": config.suite,
        "bubble_s": bubble_s, "bubble_fraction": bubble_fraction,
        "time_basis": time_basis, "wall_time_s": wall_s,
        "fine_eval_every": config.fine_eval_every,
        "ttt_resolution": config.ttt_resolution,
        **hit_fields(book.hits.get(config.target) if config.target is not None else None),
        "milestones": milestone_records(book, config.milestones),
    }


def _run_simulated(run: PreparedRun, *, overwrite: bool = False, show_progress: bool = True,
                   wandb: bool = True, resume: bool = False,
                   reuse: Reuse | None = None) -> dict[str, Any]:
    from decobench.runs.tracking import wandb_tracker_factory

    return execute(run, overwrite=overwrite, show_progress=show_progress,
                   tracker_factory=wandb_tracker_factory(wandb), resume=resume, reuse=reuse)


SIMULATED = Backend(
    "simulated", "n workers in one process on the simulated clock (docs/design.md §4)",
    check=lambda run: None, run=_run_simulated, parallel_cells=True)
"""The simulated backend (entry point ``simulated`` of ``decobench.backends``)."""
