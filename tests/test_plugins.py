"""Open registries: a method from an outside package, installed into the venv, runs through
``decobench run`` and ``decobench sweep`` (docs/extending.md; its example package is
docs/examples/randk-plugin). Broken or clashing plugins fail with one line naming them."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from e2e_shared import cells_in_this_process

from decobench.errors import DecobenchError
from decobench.methods import METHODS, get_method_spec, method_specs
from decobench.registry import Registry
from decobench.runs.rundir import read_metrics, read_summary
from decobench.tasks import TASKS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "examples" / "randk-plugin"
DECOBENCH = Path(sys.executable).parent / "decobench"


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def randk_installed(tmp_path_factory):
    """The example plugin, built offline and installed into this venv; uninstalled after."""
    source = tmp_path_factory.mktemp("plugin") / "randk-plugin"
    shutil.copytree(EXAMPLE, source)
    done = _pip("install", "--no-deps", "--no-build-isolation", "--no-index", str(source))
    if done.returncode != 0:
        pytest.fail(f"could not install the example plugin:\n{done.stderr[-2000:]}")
    importlib.invalidate_caches()            # this process imports it too (in-process CLI)
    try:
        yield
    finally:
        _pip("uninstall", "-y", "randk-plugin")


def test_shipped_methods_and_tasks_come_from_entry_points():
    from importlib.metadata import entry_points

    methods = {e.name for e in entry_points(group="decobench.methods")}
    assert {"d-sgd", "accordion", "dga", "cocktail-sgd", "cocktail-sgd-topk", "dd-ef-sgd",
            "deco-sgd"} <= methods
    assert {e.name for e in entry_points(group="decobench.tasks")} == set(TASKS.names())
    assert set(method_specs()) == set(METHODS.names())


def test_plugin_method_runs_through_run_and_sweep(randk_installed, tmp_path, fmnist_root,
                                                  capsys):
    """`decobench run` in a fresh process (the installed command finds the plugin through its
    entry point); its --help and a sweep through the CLI in this process."""
    from decobench.cli.main import main

    common = ["--no-progress", "--no-wandb"]
    out = tmp_path / "run"
    done = subprocess.run(
        [str(DECOBENCH), "run", "--task", "cnn-fmnist", "--method", "randk-sgd", "--delta",
         "0.05", "--tau", "1", "--workers", "2", "--batch-size", "16", "--max-iters", "6",
         "--eval-every", "3", "--trace", "wan-200ms-lowbw-varying", "--data-root",
         str(fmnist_root), "--out", str(out), *common],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = read_summary(out)
    assert summary["method"] == "randk-sgd" and summary["status"] == "finished"
    rows = read_metrics(out)
    d = summary["parameters"]
    k = -(-5 * d // 100)                          # ⌈0.05 d⌉
    assert {r["bits"] for r in rows} == {32 * k} and {r["tau"] for r in rows} == {1}

    assert main(["run", "--method", "randk-sgd", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "options of randk-sgd" in help_text and "fraction of coordinates sent" in help_text
    # a plugin has no card among decobench's docs: the help does not point at one
    assert "docs/methods/randk-sgd.md" not in help_text
    assert "its card is in its own package's documentation" in help_text

    suite = tmp_path / "plugin-suite.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "plugin", "description": "an outside method beside D-SGD",
        "defaults": {"batch_size": 16, "eval_every": 3},
        "conditions": {"wan": {"trace": "wan-200ms-lowbw-varying"}},
        "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["wan"],
                         "methods": ["d-sgd", {"method": "randk-sgd", "options":
                                               {"delta": 0.05}}],
                         "workers": [2], "seeds": [0], "max_iters": 6}]}))
    results = tmp_path / "results"
    with cells_in_this_process():
        assert main(["sweep", str(suite), "--out", str(results), "--jobs", "1",
                     "--data-root", f"cnn-fmnist={fmnist_root}", *common]) == 0
    methods = sorted(read_summary(run)["method"] for run in (results / "runs").iterdir())
    assert methods == ["d-sgd", "randk-sgd"]


def test_extending_doc_shows_the_example_package():
    doc = (REPO / "docs" / "extending.md").read_text()
    for name in ("randk_plugin.py", "pyproject.toml"):
        assert (EXAMPLE / name).read_text().strip() in doc, f"docs/extending.md misses {name}"


def _entry(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group="decobench.methods")


def test_broken_and_clashing_plugins_fail_with_one_line(monkeypatch):
    import decobench.registry as registry

    entries = [_entry("broken", "no_such_module_xyz:SPEC"),
               _entry("twice", "decobench.methods:DD_EF_SGD_SPEC"),
               _entry("twice", "decobench.methods:DECO_SGD_SPEC"),
               _entry("misnamed", "decobench.methods:DECO_SGD_SPEC"),
               _entry("not-a-spec", "decobench.methods:METHODS")]
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [e for e in entries if group == "decobench.methods"])
    with pytest.raises(DecobenchError, match="method 'broken' failed to load from entry point "
                       "broken = no_such_module_xyz:SPEC.*ModuleNotFoundError"):
        get_method_spec("broken")
    with pytest.raises(DecobenchError, match="registered twice"):
        get_method_spec("twice")
    with pytest.raises(DecobenchError, match="names a method called 'deco-sgd'"):
        get_method_spec("misnamed")
    with pytest.raises(DecobenchError, match="is not a method: expected a "
                       "decobench.methods.MethodSpec"):
        get_method_spec("not-a-spec")
    with pytest.raises(DecobenchError, match="unknown method 'nope'; available methods: "
                       "broken, misnamed, not-a-spec, twice"):
        get_method_spec("nope")
    with pytest.raises(DecobenchError) as caught:
        get_method_spec("broken")
    assert "\n" not in str(caught.value)


def test_register_in_process_shadows_and_lists():
    seen = Registry("decobench.nothing-here", "widget", lambda obj: obj["name"])
    assert seen.names() == []
    seen.register({"name": "w"})
    assert seen.names() == ["w"] and seen.get("w") == {"name": "w"}
    with pytest.raises(DecobenchError, match="is not a widget"):
        Registry("g", "widget", lambda obj: obj.name).register(object())


def test_cli_lists_plugin_errors_as_one_line(monkeypatch, capsys):
    from decobench.cli.main import main

    assert main(["run", "--task", "cnn-fmnist", "--method", "no-such-method", "--trace",
                 "wan-200ms-lowbw-varying", "--no-progress", "--no-wandb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown method 'no-such-method'" in err[0]
