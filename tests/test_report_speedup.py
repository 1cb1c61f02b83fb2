"""The time-to-target table: speed-ups over D-SGD and CocktailSGD, lower bounds, misses."""

from reports.speedup import speedup, speedup_table, write_report


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


def test_table_has_a_column_per_reference_method():
    runs = [_summary("d-sgd", 300.0), _summary("cocktail-sgd", 120.0),
            _summary("deco-sgd", 80.0), _summary("dga", None, sim=500.0)]
    table = speedup_table(runs)
    header = next(line for line in table.splitlines() if line.startswith("| method"))
    assert header.endswith("| speed-up over d-sgd | speed-up over cocktail-sgd |")
    deco = next(line for line in table.splitlines() if line.startswith("| deco-sgd"))
    assert deco.endswith("| 3.75x | 1.50x |")
    dga = next(line for line in table.splitlines() if line.startswith("| dga"))
    assert "not reached (budget_exhausted, ran 500.0 s)" in dga and dga.endswith(
        "| n/a (not reached) | n/a (not reached) |")


def test_table_without_references_says_so(tmp_path):
    assert "no speed-ups" in speedup_table([_summary("deco-sgd", 80.0)])


def test_write_report_reads_run_directories(tmp_path):
    import json
    for s in (_summary("d-sgd", 300.0), _summary("deco-sgd", 75.0)):
        (tmp_path / s["method"]).mkdir()
        (tmp_path / s["method"] / "summary.json").write_text(json.dumps(s))
    path, text = write_report(tmp_path)
    assert path.read_text() == text and "| deco-sgd |" in text and "4.00x" in text
