"""The run parser's metadata cache (decobench.cli_metadata): ``decobench run --help`` and the
errors found at the edge answer without importing torch once the cache is current, print
the same help as the registries give, and a changed source file or plugin set re-reads
them."""

import json
import os
import subprocess
import sys

PROBE = """
import sys
from decobench.cli import main
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


def test_a_changed_source_file_or_a_corrupt_cache_reads_the_registries_again(tmp_path):
    _decobench(tmp_path, "run", "--help")
    cache = tmp_path / "cli-metadata.json"
    record = json.loads(cache.read_text())
    accordion = next(path for path, _, _ in record["files"]
                     if path.endswith(os.path.join("baselines", "accordion.py")))
    before = os.stat(accordion)
    try:
        os.utime(accordion, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        assert _decobench(tmp_path, "run", "--help")[1] == "TORCH 0"
        assert _decobench(tmp_path, "run", "--help")[1] == "NO-TORCH 0"
    finally:
        os.utime(accordion, ns=(before.st_atime_ns, before.st_mtime_ns))
    cache.write_text("{not json")
    assert _decobench(tmp_path, "run", "--help")[1] == "TORCH 0"
    assert json.loads(cache.read_text())["metadata"]["methods"]["accordion"]["options"]


def test_cached_metadata_equals_the_registries(tmp_path, monkeypatch):
    from decobench import cli_metadata

    monkeypatch.setenv("DECOBENCH_CACHE_DIR", str(tmp_path))
    _decobench(tmp_path, "run", "--help")
    cached = json.loads((tmp_path / "cli-metadata.json").read_text())["metadata"]
    assert cached == cli_metadata.collect()


def test_an_unwritable_cache_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    text, verdict, _ = _decobench(blocker / "sub", "run", "--help")
    assert verdict == "TORCH 0" and "--accordion-eta" in text
