"""Speed-ups of one run over another: values, lower bounds and misses (reports/speedup.py)."""

from decobench.reports.speedup import speedup, speedup_of
from decobench.reports.stats import Obs


def _summary(method, ttt=None, sim=100.0, **extra):
    base = {"task": "cnn-fmnist", "trace": "wan", "workers": 4, "seed": 0, "target": 0.75,
            "metric_name": "accuracy", "method": method, "reached": ttt is not None,
            "time_to_target_s": ttt, "iters_to_target": 10 if ttt else None,
            "final_metric": 0.8, "status": "finished" if ttt else "budget_exhausted",
            "sim_time_s": sim, "bits_sent": 1e6, "bubble_fraction": 0.1}
    return base | extra


def test_speedup_value_lower_bound_and_miss():
    assert speedup(_summary("a", 20.0), _summary("b", 60.0)).value == 3.0
    bound = speedup(_summary("a", 20.0), _summary("b", None, sim=300.0))
    assert (bound.value, bound.lower_bound, str(bound)) == (15.0, True, ">= 15.00x")
    assert str(speedup(_summary("a", None), _summary("b", 60.0))) == "n/a (not reached)"


def test_old_table_values_hold():
    """The hand-checked single-run table: deco 80 s vs d-sgd 300 s and cocktail 120 s."""
    deco, dga = _summary("deco-sgd", 80.0), _summary("dga", None, sim=500.0)
    assert str(speedup(deco, _summary("d-sgd", 300.0))) == "3.75x"
    assert str(speedup(deco, _summary("cocktail-sgd", 120.0))) == "1.50x"
    assert str(speedup(dga, _summary("d-sgd", 300.0))) == "n/a (not reached)"


def test_speedup_of_medians():
    assert speedup_of(Obs(100.0), Obs(250.0, True)).kind == "lower_bound"
    assert str(speedup_of(Obs(100.0), Obs(250.0, True))) == ">= 2.50x"
    assert speedup_of(Obs(100.0, True), Obs(50.0)).kind == "not_reached"
    assert speedup_of(Obs(50.0), Obs(100.0)).kind == "exact"
