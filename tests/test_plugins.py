"""Open registries: a method from an outside package, installed into the venv, runs through
``decobench run`` (both backends: its compressor gives its messages their wire form) and
``decobench sweep`` (docs/extending.md; its example package is docs/examples/randk-plugin).
Broken or clashing plugins fail with one line naming them."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch
import yaml
from e2e_shared import cells_in_this_process
from hostfeatures import emulation_unavailable, left_behind, namespaces
from test_emulated_launcher import LANES

from decobench.compression.codec import HEADER_FIELDS
from decobench.errors import DecobenchError
from decobench.methods import METHODS, get_method_spec, method_specs
from decobench.registry import Registry
from decobench.runs.rundir import read_metrics, read_summary
from decobench.tasks import TASKS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "examples" / "randk-plugin"
DECOBENCH = Path(sys.executable).parent / "decobench"


_EMULATION = emulation_unavailable()


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


def _example_module(monkeypatch):
    """randk_plugin.py imported from docs/examples (not installed), for this test only."""
    spec = importlib.util.spec_from_file_location("randk_plugin", EXAMPLE / "randk_plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "randk_plugin", module)
    spec.loader.exec_module(module)
    return module


def test_example_wire_form_round_trips(monkeypatch):
    """Each worker's Rand-k message travels as its k fp32 values alone, exactly ⌈32k/8⌉
    bytes, and decodes (indices drawn again from the iteration) to its share of
    Compressed.mean(); the emulated backend's frames of every rank give the mean itself."""
    from decobench.emulated.comm import encode_message, received

    plugin = _example_module(monkeypatch)
    n, d, iteration, k = 3, 1000, 7, 50
    p = torch.randn(n, d)
    compressed = plugin.RandK().compress(p, k / d, iteration)
    assert compressed.bits_per_worker == 32 * k
    mean = compressed.mean()
    header = dict.fromkeys(HEADER_FIELDS, math.nan) | {"iteration": float(iteration)}
    for row in range(n):
        payload, fields = compressed.wire.encode(row)
        assert payload.dtype == torch.uint8 and payload.numel() == -(-32 * k // 8)
        padded = torch.cat([payload, torch.zeros(3, dtype=torch.uint8)])  # a frame's padding
        values, indices = compressed.wire.decoder.decode(padded, header | fields, d)
        share = slice(row * k, (row + 1) * k)
        assert torch.equal(values / n, mean.values[share])
        assert torch.equal(indices, mean.indices[share])
    # one rank per row, as the emulated backend sends them
    outgoing = [encode_message(plugin.RandK().compress(p[r:r + 1], k / d, iteration),
                               {"iteration": float(iteration)}, r, n) for r in range(n)]
    _, _, update = received(outgoing[0], [m.buffer for m in outgoing], d, n,
                            torch.device("cpu"))
    assert torch.equal(update.values, mean.values) and torch.equal(update.indices, mean.indices)
    # a wire form that sends other than the ⌈W/8⌉ bytes charged stops with one line
    wrong = dataclasses.replace(compressed, bits_per_worker=32 * k + 8)
    with pytest.raises(DecobenchError, match=f"messages are {32 * k + 8} bits but its own wire "
                       f"format would send {32 * k}: .* exactly ⌈W/8⌉ = {4 * k + 1} bytes"):
        encode_message(wrong, {"iteration": float(iteration)}, 0, n)


@pytest.mark.skipif(_EMULATION is not None, reason=f"the emulated backend: {_EMULATION}")
def test_plugin_method_runs_emulated(randk_installed, tmp_path, fmnist_root):
    """The installed plugin on two netns ranks: every message is 32k bits on the wire, and
    the losses are the simulated run's (the decoded updates are the ones sent)."""
    from decobench.cli.main import main

    args = ["run", "--task", "cnn-fmnist", "--profile", "cpu", "--method", "randk-sgd",
            "--delta", "0.05", "--tau", "1", "--workers", "2", "--trace",
            "constant-20mbps-100ms", "--max-iters", "4", "--eval-every", "4", "--data-root",
            str(fmnist_root), "--no-wandb", "--no-progress"]
    before = namespaces()
    emulated = tmp_path / "emulated"
    assert main([*args, "--backend", "emulated", *LANES, "--out", str(emulated)]) == 0
    assert not left_behind(before), "namespaces left behind"
    summary = read_summary(emulated)
    assert (summary["backend"], summary["method"], summary["status"]) == (
        "emulated", "randk-sgd", "finished")
    rows = read_metrics(emulated)
    k = -(-5 * summary["parameters"] // 100)      # ⌈0.05 d⌉
    assert len(rows) == 4 and {r["bits"] for r in rows} == {32 * k}
    assert main([*args, "--out", str(tmp_path / "simulated")]) == 0
    simulated = read_metrics(tmp_path / "simulated")
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in simulated], rel=1e-5)


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
