"""Does a small model's iteration ratio carry over to a larger one? (issue 43; docs/reports.md
"Claims", "Scale check")

The simulated clock charges a method its iterations times its per-iteration time, so a
speed-up measured on a small stand-in model (GPT-2 ``cpu``, 0.94M parameters) holds at the
paper's size only if compressed training needs about as many more iterations than D-SGD
there as it does here. For a task with a :class:`ScaleReference`, that ratio was measured on
a larger profile (GPT-2 ``mid``, 27.4M) by a shipped suite, and each claim row judged on
smaller runs is compared with it:

- a cell's *iteration ratio* of a method = its median iterations to target over D-SGD's in
  the same (task, condition, workers) cell (:func:`iteration_ratios`; censored medians as in
  :mod:`decobench.reports.stats`: a method that missed the target gives a lower bound). A
  row that compares DeCo-SGD with a rival, without D-SGD, reads D-SGD's runs of the same
  cells from the rest of the report (``baselines``); a row of D-SGD alone has no ratio;
- the ratio *differs* when it is more than :data:`TOLERANCE` (20%) above or below the
  reference's ratio for the same method label; with a lower bound on either side it differs
  only when the bound already decides it, else the check is undecided (:func:`differs`);
- a row whose ratios differ says so in its verdict (beside ``at small scale``) and in its
  model column; a row of a task whose reference is not measured yet says that instead, and
  one with methods the reference did not measure (its suite still running, or a method it
  does not run, e.g. ``static-mean-plan``) names them.

The reference is one condition (the paper's regime, DeCo's plan there) while a row's cells
are many: the text names both, so a reader sees when the plans are not the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from decobench.reports.runs import Run, as_float
from decobench.reports.stats import Obs, median, ratio
from decobench.reports.tables import cell_key, group

TOLERANCE = 0.20
"""A small model's iteration ratio differs from the reference's when it is more than this
share above or below it (issue 43)."""
D_SGD = "d-sgd"


@dataclass(frozen=True)
class Measurement:
    """Iterations to ``target`` of each method over D-SGD's, measured on a reference profile."""

    suite: str
    condition: str
    target: float
    seeds: tuple[int, ...]
    dsgd_iterations: float
    ratios: Mapping[str, Obs]
    source: str


@dataclass(frozen=True)
class ScaleReference:
    """The larger ``profile`` of ``task`` that smaller runs' iteration ratios are checked
    against, the ``doc`` that says how it is measured and its :class:`Measurement`
    (``None`` until its suite has run and its figures are entered here). ``rules``: how the
    reference trains where the rows' runs may not (its update rules), said beside its ratios
    so a reader sees that the two sides are not the same training."""

    task: str
    profile: str
    parameters: int
    doc: str
    measurement: Measurement | None = None
    rules: str = ""


REFERENCES: dict[str, ScaleReference] = {
    "gpt2-wikitext": ScaleReference(
        "gpt2-wikitext", "mid", 27435008, 'docs/tasks/gpt2-wikitext.md "Scale check"',
        Measurement("gpt2-scale-check", "paper-gpt2", 1250.0, (0,), 225.0,
                    {"accordion": Obs(1.0222222222222221, False),
                     "cocktail-sgd": Obs(1.4222222222222223, False),
                     "cocktail-sgd-topk": Obs(1.2444444444444445, False),
                     "deco-sgd": Obs(1.288888888888889, False),
                     "dga": Obs(1.0222222222222221, False)},
                    "4 workers, seeds 0; all six methods of the suite "
                    "(docs/results/gpt2-scale-check.md, runs of 2026-11-29)"),
        rules="each worker's gradient clipped to norm 1 (the paper profile's setting)"),
}
"""One reference per task, entered by hand from ``python -m decobench.reports.scale
RESULTS`` (which prints the entry) with the run's provenance in ``source``; one source for
each fact, as :data:`decobench.sweeps.cost.STEP_TIMES`. tests/test_results_scale.py checks
that GPT-2's entry is what the committed runs of docs/results/gpt2-scale-check measure."""


def count_text(n: float) -> str:
    """``454,922`` as ``455K``, ``124,439,808`` as ``124M``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def parameters(run: Run) -> float | None:
    return as_float(run.summary.get("parameters", run.config.get("parameters")))


def iteration_ratios(runs: Sequence[Run]) -> dict[tuple[str, str, int], dict[str, Obs]]:
    """Per (task, condition, workers) cell with D-SGD runs that reached the target: each
    other label's median iterations to target over D-SGD's (a lower bound where the label's
    median is censored). Cells whose D-SGD median is censored give no ratio."""
    out: dict[tuple[str, str, int], dict[str, Obs]] = {}
    for key, rs in sorted(group(runs, cell_key).items()):
        by_label = group(rs, lambda r: r.label)
        if D_SGD not in by_label:
            continue
        base = median([r.iters for r in by_label[D_SGD]])
        ratios = {label: ratio(median([r.iters for r in lrs]), base)
                  for label, lrs in sorted(by_label.items()) if label != D_SGD}
        kept = {label: value for label, value in ratios.items() if value is not None}
        if kept:
            out[key] = kept
    return out


def differs(ours: Obs, reference: Obs, tolerance: float = TOLERANCE) -> bool | None:
    """Whether ``ours`` lies more than ``tolerance`` above or below ``reference``; ``None``
    when a lower bound leaves it open (module docstring)."""
    high, low = (1 + tolerance) * reference.value, (1 - tolerance) * reference.value
    if not ours.censored and not reference.censored:
        return ours.value > high or ours.value < low
    if ours.censored and not reference.censored:
        return True if ours.value > high else None
    if reference.censored and not ours.censored:
        return True if ours.value < low else None
    return None


@dataclass(frozen=True)
class ScaleCheck:
    """What a claim row says about scale: ``notes`` for its model column, ``differ`` for its
    verdict's small-scale qualifier (empty when nothing was found to differ)."""

    notes: tuple[str, ...] = ()
    differ: tuple[str, ...] = ()


def _ratio_text(value: Obs) -> str:
    return value.text("{:.2f}") + "x"


def _smaller(run: Run, reference: ScaleReference) -> bool:
    """Whether ``run``'s model is smaller than ``reference``'s (a run without a recorded
    size is not)."""
    return (parameters(run) or reference.parameters) < reference.parameters


def _dsgd_beside(runs: Sequence[Run], baselines: Sequence[Run],
                 reference: ScaleReference) -> list[Run]:
    """The D-SGD runs of ``baselines`` smaller than ``reference`` in the cells of ``runs``
    that have none of their own."""
    own = {cell_key(r) for r in runs if r.label == D_SGD}
    wanted = {cell_key(r) for r in runs} - own
    return [r for r in baselines if r.label == D_SGD and cell_key(r) in wanted
            and _smaller(r, reference)]


def check(runs: Sequence[Run],
          references: Mapping[str, ScaleReference] = REFERENCES,
          baselines: Sequence[Run] = ()) -> ScaleCheck:
    """Compare ``runs`` smaller than their task's reference with it; ``baselines``: the
    report's runs, whose D-SGD runs give the ratios of cells where ``runs`` have no D-SGD
    (module docstring)."""
    notes: list[str] = []
    differ: list[str] = []
    for task, rs in sorted(group(runs, lambda r: r.task).items()):
        reference = references.get(task)
        if reference is None:
            continue
        small = [r for r in rs if _smaller(r, reference)]
        if not small:
            continue
        where = f"{reference.profile} profile ({count_text(reference.parameters)})"
        if all(r.label == D_SGD for r in small):
            notes.append(f"{task}: D-SGD alone, no iteration ratio to check")
            continue
        measured = reference.measurement
        if measured is None:
            notes.append(f"{task}: iteration ratios not checked at the {where}: not measured "
                         f"yet ({reference.doc})")
            continue
        sizes = "/".join(count_text(p) for p in sorted({int(p) for p in
                                                        map(parameters, small) if p}))
        ratios = iteration_ratios([*small, *_dsgd_beside(small, baselines, reference)])
        found = _compare(ratios, measured)
        unmeasured = sorted({label for cell in ratios.values() for label in cell}
                            - set(measured.ratios))
        missing = (f"; not measured there: {', '.join(unmeasured)}" if unmeasured
                   else "")
        if not found:
            notes.append(f"{task}: iteration ratios not checked at the {where}: no cell "
                         f"has D-SGD and a method measured there{missing}")
            continue
        parts, off = [], []
        for label, cells in sorted(found.items()):
            theirs = measured.ratios[label]
            ours = ", ".join(f"{_ratio_text(v)} ({k[1]})" for k, v, _ in cells)
            parts.append(f"{label} {ours} vs {_ratio_text(theirs)}")
            if any(d for _, _, d in cells):
                off.append(f"{label} {ours} at {sizes} vs {_ratio_text(theirs)} at "
                           f"{count_text(reference.parameters)}")
        verdict = (f"differ by more than {TOLERANCE:.0%}" if off
                   else f"within {TOLERANCE:.0%} or undecided")
        trained = f" with {reference.rules}" if reference.rules else ""
        notes.append(f"{task}: iterations over D-SGD's at {sizes} vs the {where} at "
                     f"{measured.condition}{trained}: {'; '.join(parts)} ({verdict})"
                     f"{missing}")
        if off:
            differ.append(f"iterations over D-SGD's differ at {count_text(reference.parameters)}"
                          f": {'; '.join(off)}")
    return ScaleCheck(tuple(notes), tuple(differ))


def _compare(ratios: Mapping[tuple[str, str, int], Mapping[str, Obs]], measured: Measurement
             ) -> dict[str, list[tuple[tuple[str, str, int], Obs, bool | None]]]:
    found: dict[str, list[tuple[tuple[str, str, int], Obs, bool | None]]] = {}
    for key, by_label in ratios.items():
        for label, ours in by_label.items():
            if label in measured.ratios:
                found.setdefault(label, []).append(
                    (key, ours, differs(ours, measured.ratios[label])))
    return found


def measure(runs: Sequence[Run], task: str, profile: str) -> Measurement:
    """The :class:`Measurement` of ``task``'s ``profile`` runs: one condition, one target,
    D-SGD's median iterations to it and each other label's ratio (:func:`iteration_ratios`).
    """
    chosen = [r for r in runs if r.task == task and r.summary.get("profile") == profile]
    if not chosen:
        raise ValueError(f"no {task} runs of profile {profile!r}")
    conditions = sorted({r.condition for r in chosen})
    targets = sorted({float(r.summary["target"]) for r in chosen})
    if len(conditions) != 1 or len(targets) != 1:
        raise ValueError(f"a reference is one condition and one target; the runs have "
                         f"conditions {conditions} and targets {targets}")
    cells = iteration_ratios(chosen)
    if not cells:
        raise ValueError("D-SGD did not reach the target in its median run (or did not run): "
                         "no ratio to measure")
    (key, ratios), = cells.items()
    dsgd = median([r.iters for r in chosen if r.label == D_SGD])
    seeds = tuple(sorted({r.seed for r in chosen}))
    suites = sorted({str(r.summary.get("suite")) for r in chosen})
    return Measurement(", ".join(suites), conditions[0], targets[0], seeds, dsgd.value,
                       dict(ratios), f"{key[2]} workers, seeds {', '.join(map(str, seeds))}")


def entry_text(reference: ScaleReference, measured: Measurement) -> str:
    """``measured`` as the Python entry of :data:`REFERENCES` (to paste, with a date and the
    commit added to its source)."""
    ratios = ", ".join(f"{label!r}: Obs({value.value!r}, {value.censored!r})"
                       for label, value in measured.ratios.items())
    return (f"{reference.task!r}: ScaleReference(\n    {reference.task!r}, {reference.profile!r}, "
            f"{reference.parameters}, {reference.doc!r},\n    Measurement({measured.suite!r}, "
            f"{measured.condition!r}, {measured.target!r}, {measured.seeds!r}, "
            f"{measured.dsgd_iterations!r},\n"
            f"                {{{ratios}}},\n                {measured.source!r})"
            + (f",\n    rules={reference.rules!r})," if reference.rules else "),"))


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m decobench.reports.scale RESULTS``: measure each task's reference profile
    in a results folder (the suite of :data:`REFERENCES`) and print its ratios and the entry
    to add to :data:`REFERENCES`."""
    import argparse

    from decobench.reports.runs import load_runs

    parser = argparse.ArgumentParser(prog="python -m decobench.reports.scale",
                                     description=main.__doc__)
    parser.add_argument("results", help="a results folder of decobench sweep")
    args = parser.parse_args(None if argv is None else list(argv))
    runs = load_runs(args.results).runs
    done = 0
    for reference in REFERENCES.values():
        try:
            measured = measure(runs, reference.task, reference.profile)
        except ValueError as exc:
            print(f"{reference.task}/{reference.profile}: not measured ({exc})")
            continue
        done += 1
        print(f"{reference.task}/{reference.profile} at {measured.condition}, target "
              f"{measured.target:g}: D-SGD {measured.dsgd_iterations:g} iterations; "
              + ", ".join(f"{label} {_ratio_text(v)}" for label, v in measured.ratios.items()))
        print(entry_text(reference, measured))
    return 0 if done else 1


if __name__ == "__main__":
    raise SystemExit(main())
