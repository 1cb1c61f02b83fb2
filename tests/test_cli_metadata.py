"""The run parser's metadata cache (decobench.cli.metadata): ``decobench run --help`` and the
errors found at the edge answer without importing torch once the cache is current, print
the same help as the registries give, and a changed source file or plugin set re-reads
them."""

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import sys
from decobench.cli.main import main
code = main(sys.argv[1:])
print("TORCH" if "torch" in sys.modules else "NO-TORCH", code)
"""


def _decobench(cache, *args):
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "DECOBENCH_CACHE_DIR": str(cache)})
    *help_lines, verdict = proc.stdout.strip().splitlines()
    return "\n".join(help_lines), verdict, proc.stderr


def test_a_warm_cache_answers_without_torch_and_the_same_help(tmp_path):
    cold, verdict_cold, _ = _decobench(tmp_path, "run", "--method", "accordion", "--help")
    assert verdict_cold == "TORCH 0"                      # first time: read the registries
    warm, verdict_warm, _ = _decobench(tmp_path, "run", "--method", "accordion", "--help")
    assert verdict_warm == "NO-TORCH 0" and warm == cold
    assert "--accordion-eta" in warm and "deco-sgd" in warm
    _, verdict, err = _decobench(tmp_path, "run", "--task", "cnn-fmnist", "--method", "d-sgd",
                                 "--trace", "constant-1gbps-10ms", "--lr", "inf")
    assert verdict == "NO-TORCH 2" and "--lr: Input should be a finite number" in err


@pytest.fixture
def fresh_process(tmp_path, monkeypatch):
    """run_metadata() as a fresh process sees it (the registries not imported yet), with the
    cache in tmp_path; returns the list of collect() calls, which stand for reading the
    registries (importing torch). In-process: the subprocess test above shows that a cache
    hit imports no torch; these check when the cache is hit (each fresh process cost 4 s)."""
    from decobench.cli import metadata as cli_metadata

    monkeypatch.setenv("DECOBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cli_metadata, "_registered_in_process", lambda: False)
    calls = []
    collect = cli_metadata.collect
    monkeypatch.setattr(cli_metadata, "collect", lambda: calls.append(1) or collect())
    return calls


def test_a_changed_source_file_or_a_corrupt_cache_reads_the_registries_again(tmp_path,
                                                                              fresh_process):
    from decobench.cli.metadata import run_metadata

    first = run_metadata()
    assert len(fresh_process) == 1
    cache = tmp_path / "cli-metadata.json"
    record = json.loads(cache.read_text())
    accordion = next(path for path, _, _ in record["files"]
                     if path.endswith(os.path.join("baselines", "accordion.py")))
    before = os.stat(accordion)
    try:
        os.utime(accordion, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        assert run_metadata() == first and len(fresh_process) == 2     # read again
        assert run_metadata() == first and len(fresh_process) == 2     # then cached
    finally:
        os.utime(accordion, ns=(before.st_atime_ns, before.st_mtime_ns))
    cache.write_text("{not json")
    assert run_metadata() == first and len(fresh_process) == 3
    assert json.loads(cache.read_text())["metadata"]["methods"]["accordion"]["options"]


def test_cached_metadata_equals_the_registries(tmp_path, fresh_process):
    from decobench.cli import metadata as cli_metadata

    cli_metadata.run_metadata()
    cached = json.loads((tmp_path / "cli-metadata.json").read_text())["metadata"]
    assert cached == cli_metadata.collect()          # survives the JSON round trip
    assert cli_metadata.run_metadata() == cached and len(fresh_process) == 2


def test_an_unwritable_cache_is_skipped(tmp_path, fresh_process, monkeypatch):
    from decobench.cli import metadata as cli_metadata

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("DECOBENCH_CACHE_DIR", str(blocker / "sub"))
    metadata = cli_metadata.run_metadata()
    assert "accordion_eta" in metadata["methods"]["accordion"]["options"]
    assert len(fresh_process) == 1 and not (blocker / "sub").exists()
