"""The backend seam: backends come from one registry (entry points), each with its typed
settings (the emulated backend's are RunConfig.emulation, nested), and decobench sweep runs a
suite on either backend (emulated cells one at a time), with identities unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.runs.backends import BACKENDS, Backend, get_backend
from decobench.runs.config import EmulationConfig, RunConfig, build_run_config
from decobench.runs.identity import identity
from decobench.runs.rundir import read_summary

BASE = dict(task="cnn-fmnist", method="d-sgd", trace="constant-20mbps-100ms")


def test_shipped_backends_are_registered_entry_points():
    from importlib.metadata import entry_points

    assert {e.name for e in entry_points(group="decobench.backends")} >= {"simulated",
                                                                         "emulated"}
    assert BACKENDS.names() == ["emulated", "simulated"]
    assert get_backend("simulated").parallel_cells and not get_backend("emulated").parallel_cells
    assert all(isinstance(get_backend(n), Backend) for n in BACKENDS.names())


def test_unknown_backend_is_one_line_before_anything(tmp_path, capsys):
    code = main(["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace",
                 "constant-20mbps-100ms", "--backend", "carrier-pigeon", "--no-progress",
                 "--no-wandb", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "unknown backend 'carrier-pigeon'; available backends: emulated, simulated" in err[0]
    assert not (tmp_path / "x").exists()


def test_emulation_settings_are_nested_and_the_flat_flags_still_set_them(tmp_path):
    flat = RunConfig(**BASE, backend="emulated", latency_mechanism="comm-layer",
                     emulation_timeout_s=30, skip_probe=True)
    nested = RunConfig(**BASE, backend="emulated", emulation={
        "latency_mechanism": "comm-layer", "timeout_s": 30, "skip_probe": True})
    assert flat == nested
    assert flat.emulation == EmulationConfig(latency_mechanism="comm-layer", timeout_s=30,
                                             skip_probe=True)
    assert "latency_mechanism" not in RunConfig.model_fields       # no flat fields left
    # a YAML file may use either form; a flat key overrides the nested one
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**BASE, "emulation": {"timeout_s": 5},
                                      "latency_mechanism": "comm-layer"}))
    from decobench.runs.config import load_yaml_config

    loaded = build_run_config(load_yaml_config(config))
    assert loaded.emulation == EmulationConfig(latency_mechanism="comm-layer", timeout_s=5)
    with pytest.raises(DecobenchError, match=r"--latency-mechanism: Input should be"):
        build_run_config({**BASE, "latency_mechanism": "pigeon"})
    with pytest.raises(DecobenchError, match=r"--emulation-timeout-s: Input should be greater"):
        build_run_config({**BASE, "emulation": {"timeout_s": -1}})


def test_identities_did_not_change_when_the_settings_were_nested():
    # measured before RunConfig.emulation existed (commit 4d1542e)
    assert identity(RunConfig(**BASE, backend="emulated")) == (
        "523594e6bb065652b9484578bb82127fdeb9910876d5121e53e2a9a1f3b49dce")
    assert identity(RunConfig(**BASE, backend="emulated", latency_mechanism="comm-layer",
                              emulation_timeout_s=30)) == (
        "b005a22f2295baee1c6308bb10848550dcfaf79949e0751067f3c4f47afa3de5")


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny-emulated", "description": "two methods on two real ranks",
        "defaults": {"batch_size": 16, "eval_every": 4, "profile": "cpu"},
        "conditions": {"link": {"trace": "constant-20mbps-100ms"}},
        "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["link"],
                         "methods": ["d-sgd", "deco-sgd"], "workers": [2], "seeds": [0],
                         "max_iters": 4}]}))
    return path


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the error a non-root user gets")
def test_emulated_sweep_without_root_stops_before_any_run(tmp_path, fmnist_root):
    from decobench.sweeps.suite import load_suite
    from decobench.sweeps.sweep import sweep

    suite, _ = load_suite(str(_suite(tmp_path)))
    with pytest.raises(DecobenchError, match="root"):
        sweep(suite, tmp_path / "out", data_roots={"cnn-fmnist": str(fmnist_root)},
              wandb=False, show_progress=False, backend="emulated")
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow  # about 65 s: two emulated runs (make test-slow)
def test_a_suite_runs_on_the_emulated_backend_one_cell_at_a_time(tmp_path, fmnist_root, root):
    out = tmp_path / "results"
    args = ["sweep", str(_suite(tmp_path)), "--out", str(out), "--backend", "emulated",
            "--no-wandb", "--no-progress", "--data-root", f"cnn-fmnist={fmnist_root}"]
    assert main(args) == 0
    summaries = [read_summary(run) for run in sorted((out / "runs").iterdir())]
    assert sorted(s["method"] for s in summaries) == ["d-sgd", "deco-sgd"]
    assert {(s["backend"], s["time_basis"], s["status"]) for s in summaries} == {
        ("emulated", "measured", "finished")}
    manifest = json.loads((out / "manifest.json").read_text())
    emulated = {c["identity"] for c in manifest["cells"]}
    # the same suite on the simulated backend: other cells (their identities differ)
    from decobench.sweeps.suite import expand_cells, load_suite

    suite, _ = load_suite(str(_suite(tmp_path)))
    plain = {c.identity for c in expand_cells(suite, out / "traces",
                                              {"cnn-fmnist": str(fmnist_root)})}
    assert len(emulated) == 2 and plain.isdisjoint(emulated)
    assert main(args) == 0                       # resumed: nothing left to run
