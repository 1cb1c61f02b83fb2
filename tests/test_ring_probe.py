"""The ranks' own pre-training probe and the shaper handshake (``python -m decobench.emulated
--shaper-ready PATH --probe``), as the Docker compose stack uses them.

On unshaped loopback the probe must fail, naming the link and the numbers (loopback is far
faster than the trace's 1 Gbit/s and has no 10 ms latency), and leave its report; the
shaped case, within 10%, is checked live in tests/test_docker_live.py.
"""

import json
import threading

import pytest
from test_emulated_ranks import COMMON, _ranks

from decobench.emulated.worker import wait_for_shaper
from decobench.errors import DecobenchError


def _ready(path, mechanism):
    path.write_text(json.dumps({"dev": "eth0", "mechanism": mechanism, "rate_bps": 20e6,
                                "latency_s": 0.1}))


def test_wait_for_shaper_waits_for_the_file_and_returns_what_it_says(tmp_path):
    path = tmp_path / "run.shaped-0"
    timer = threading.Timer(0.3, _ready, (path, "nfqueue"))
    timer.start()
    assert wait_for_shaper(path, "kernel", timeout_s=10)["mechanism"] == "nfqueue"


@pytest.mark.parametrize(("shaper", "rank", "says"), [
    ("comm-layer", "kernel", "--latency-mechanism comm-layer"),
    ("nfqueue", "comm-layer", "--latency-mechanism kernel"),
    ("netem", "comm-layer", "--latency-mechanism kernel"),
])
def test_wait_for_shaper_refuses_a_latency_given_twice_or_not_at_all(tmp_path, shaper, rank,
                                                                      says):
    path = tmp_path / "run.shaped-0"
    _ready(path, shaper)
    with pytest.raises(DecobenchError, match=says):
        wait_for_shaper(path, rank, timeout_s=1)


def test_wait_for_shaper_times_out_naming_the_file(tmp_path):
    with pytest.raises(DecobenchError, match=r"waited 0.3 s for .*run.shaped-1.*shaper"):
        wait_for_shaper(tmp_path / "run.shaped-1", "kernel", timeout_s=0.3)


def test_ranks_probe_fails_on_an_unshaped_link_naming_it(tmp_path, fmnist_root):
    ready = tmp_path / "shaped"
    _ready(ready, "netem")
    out = tmp_path / "emu"
    codes, outputs = _ranks([*COMMON, "--method", "d-sgd", "--data-root", str(fmnist_root),
                             "--shaper-ready", str(ready), "--probe"], out, timeout=180)
    assert codes == [2, 2], outputs
    for output in outputs:
        assert "does not deliver the requested 1000 Mbit/s, 10 ms" in output, output
        assert "link worker 0 -> worker 1" in output and "goodput" in output
    probe = json.loads((out / "network_probe.json").read_text())
    assert not probe["ok"] and probe["probed_by"] == "ranks"
    assert probe["latency_mechanism"] == "netem"          # the shaper's word, not "kernel"
    assert [(link["src"], link["dst"]) for link in probe["links"]] == [(0, 1), (1, 0)]
    assert all(link["kernel_latency_ms"] < 5 and not link["latency_ok"]
               for link in probe["links"])
    assert not (out / "summary.json").exists() and not (out / "metrics.jsonl").exists()
