"""`decobench dashboard`: the W&B saved views of a results folder, built with wandb-workspaces
(reports/dashboard.py). Offline only: the views' specifications are read back from the JSON
file; saving online is replaced by a stand-in, never the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_report_build import write_run

from decobench.cli.main import main
from decobench.reports.dashboard import BASE_COLOR, DASHBOARD_FILE, NEW_COLOR

PROJECT = "decobench-tiny"
LINE, BAR = "Run History Line Plot", "Bar Chart"


def logged_run(root: Path, label: str, condition: str, seed: int, run_id: str | None,
               ttt: float | None = 50.0) -> Path:
    """A finished run (tests/test_report_build.py) with the config fields W&B names it by
    and, unless ``run_id`` is None, the ``wandb.json`` its tracker writes."""
    path = write_run(root / "runs", f"{label}-{condition}-s{seed}", method=label, seed=seed,
                     condition=condition, ttt=ttt)
    config = yaml.safe_load((path / "config.yaml").read_text())
    config |= {"condition": condition, "suite": "tiny"}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    if run_id is not None:
        (path / "wandb.json").write_text(json.dumps({
            "id": run_id, "project": PROJECT, "entity": None, "mode": "offline", "url": None,
            "group": f"cnn-fmnist|{condition}|{label}", "name": f"{label}-{condition}-s{seed}"}))
    return path


def results(root: Path, prefix: str) -> Path:
    """2 conditions x 2 methods x 2 seeds, run ids ``PREFIX-CONDITION-LABEL-SEED``; plus a
    run logged with --no-wandb (no wandb.json)."""
    for condition in ("wan", "lan"):
        for label in ("d-sgd", "deco-sgd"):
            for seed in (0, 1):
                logged_run(root, label, condition, seed, f"{prefix}-{condition}-{label}-{seed}",
                           ttt=None if (label, seed) == ("d-sgd", 1) else 40.0 + seed)
    logged_run(root, "dga", "wan", 0, None)
    return root


def views(path: Path) -> dict[str, dict]:
    return {v["displayName"]: v for v in json.loads(path.read_text())["views"]}


def panels(view: dict) -> list[dict]:
    return [p for s in view["spec"]["section"]["panelBankConfig"]["sections"]
            for p in s["panels"]]


def runset(view: dict) -> dict:
    (only,) = view["spec"]["section"]["runSets"]
    return only


def filters(view: dict) -> list[tuple[str, str, object]]:
    return [(f["key"]["name"], f["op"], f["value"]) for f in runset(view)["filters"]["filters"]]


def test_one_view_per_condition_with_its_panels_grouping_and_filters(tmp_path, capsys):
    folder = results(tmp_path / "new", "n")
    assert main(["dashboard", str(folder)]) == 0
    err = capsys.readouterr().err
    assert "RESULTS: 1 run(s) without a W&B run left out" in err
    assert str(folder / DASHBOARD_FILE) in err
    found = views(folder / DASHBOARD_FILE)
    assert sorted(found) == ["decobench: cnn-fmnist / lan", "decobench: cnn-fmnist / wan"]
    for condition in ("lan", "wan"):
        view = found[f"decobench: cnn-fmnist / {condition}"]
        assert (view["entity"], view["project"]) == ("", PROJECT)
        sections = view["spec"]["section"]["panelBankConfig"]["sections"]
        assert [s["name"] for s in sections] == [
            "accuracy and loss against simulated time", "time to target",
            "δ and τ against simulated time"]
        shown = [(p["viewType"], p["config"].get("xAxis"), p["config"]["metrics"])
                 for p in panels(view)]
        assert shown == [
            (LINE, "sim_time_s", ["eval/accuracy"]), (LINE, "sim_time_s", ["train/loss"]),
            (BAR, None, ["summary_metrics.time_to_target_s"]),
            (LINE, "sim_time_s", ["comm/delta"]), (LINE, "sim_time_s", ["comm/tau"]),
            (LINE, "sim_time_s", ["net/bandwidth_mbps"])]
        # grouped by method variant: the runs table and every panel (seeds averaged)
        assert runset(view)["grouping"] == [{"section": "config", "name": "label.value"}]
        assert all(p["config"]["groupBy"] == "label.value" and p["config"]["groupAgg"] == "mean"
                   for p in panels(view))
        # this condition's runs of this folder, and nothing else
        ids = [f"n-{condition}-{label}-{seed}" for label in ("d-sgd", "deco-sgd")
               for seed in (0, 1)]
        assert filters(view) == [("tags", "IN", ["task:cnn-fmnist"]),
                                 ("tags", "IN", [f"condition:{condition}"]),
                                 ("name", "IN", ids)]
        assert view["spec"]["section"]["settings"]["xAxis"] == "sim_time_s"
        assert "summary:time_to_target_s" in runset(view)["runFeed"]["columnOrder"]


def test_compare_overlays_base_and_new_cell_by_cell(tmp_path):
    base = results(tmp_path / "base", "b")
    new = results(tmp_path / "new", "n")
    logged_run(new, "deco-sgd", "edge", 0, "n-edge-only")          # a cell BASE lacks
    out = tmp_path / "elsewhere" / "dash.json"
    assert main(["dashboard", str(new), "--compare", str(base), "--out", str(out)]) == 0
    found = views(out)
    assert not (new / DASHBOARD_FILE).exists()
    assert "decobench: cnn-fmnist / edge" in found
    assert "decobench BASE vs NEW: cnn-fmnist / edge" not in found
    view = found["decobench BASE vs NEW: cnn-fmnist / wan"]
    (*_, (_, _, ids)) = filters(view)
    assert sorted(ids) == sorted(f"{side}-wan-{label}-{seed}" for side in "bn"
                                 for label in ("d-sgd", "deco-sgd") for seed in (0, 1))
    colors = view["spec"]["section"]["customRunColors"]
    assert {colors[i] for i in ids if i.startswith("b-")} == {BASE_COLOR}
    assert {colors[i] for i in ids if i.startswith("n-")} == {NEW_COLOR}
    # one line per run, not per method: each titled with its side, method and seed
    assert runset(view)["grouping"] == []
    (accuracy, *_) = panels(view)
    assert "groupBy" not in accuracy["config"]
    assert accuracy["config"]["overrideSeriesTitles"]["b-wan-deco-sgd-1:eval/accuracy"] == \
        "BASE deco-sgd s1"
    assert accuracy["config"]["overrideSeriesTitles"]["n-wan-d-sgd-0:eval/accuracy"] == \
        "NEW d-sgd s0"


def test_online_saves_each_view_and_a_failure_is_one_line(tmp_path, monkeypatch, capsys):
    import wandb_workspaces.workspaces as ws

    folder = results(tmp_path / "new", "n")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_ENTITY", "lab")
    saved = []

    def save(self):
        saved.append((self.entity, self.project, self.name))
        self._internal_name = f"v{len(saved)}"
        return self

    monkeypatch.setattr(ws.Workspace, "save", save)
    monkeypatch.setattr(ws.Workspace, "url", property(
        lambda self: f"https://wandb.example/{self.entity}/{self.project}?nw={self._internal_name}"))
    assert main(["dashboard", str(folder)]) == 0
    assert saved == [("lab", PROJECT, "decobench: cnn-fmnist / lan"),
                     ("lab", PROJECT, "decobench: cnn-fmnist / wan")]
    urls = [f"https://wandb.example/lab/{PROJECT}?nw=v1", f"https://wandb.example/lab/{PROJECT}?nw=v2"]
    assert capsys.readouterr().out.split() == urls
    assert json.loads((folder / DASHBOARD_FILE).read_text())["urls"] == urls

    def refuse(self):
        raise RuntimeError("permission denied\nmore detail")

    monkeypatch.setattr(ws.Workspace, "save", refuse)
    assert main(["dashboard", str(folder)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("decobench: error: could not save the W&B view 'decobench: "
                           f"cnn-fmnist / lan' to lab/{PROJECT}: permission denied; ")


@pytest.mark.parametrize("make,says", [
    (lambda root: root, "no finished runs"),
    (lambda root: logged_run(root, "d-sgd", "wan", 0, None).parents[1],
     "none of its runs was logged to W&B"),
])
def test_bad_results_folder_is_one_line_exit_2(tmp_path, capsys, make, says):
    folder = make(tmp_path / "results")
    folder.mkdir(parents=True, exist_ok=True)
    assert main(["dashboard", str(folder)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("decobench: error: ") and says in line
    assert not (folder / DASHBOARD_FILE).exists()
