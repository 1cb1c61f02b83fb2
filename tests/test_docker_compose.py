"""The Docker Compose files of the emulated backend (netem/compose.py, docker/, docs/docker.md).

No Docker engine is needed: the files are checked as YAML, against the code they start
(the worker's command line, the data prefetch, the run config), and with
``docker-compose config`` (Compose v1.29, Debian's package) when it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from decobench.netem.compose import DATA_COMMAND, container_trace, main, render_compose
from decobench.netem.tc import LinkSetting, tc_rate_bps

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
SHIPPED = DOCKER / "compose.yaml"
FMNIST_MINI = ROOT.parent / "shared" / "data" / "fashion-mnist-mini"
COMPOSE_VARIABLES = ("DECOBENCH_IMAGE", "TRACE", "RUN_CONFIG", "CONFIG_DIR", "RUN_NAME",
                     "RESULTS", "DATA", "DECOBENCH_PREFIX", "DECOBENCH_THREADS",
                     "DECOBENCH_HOST_CHANGES",
                     "DOCKER_TC_IMAGE", "DOCKER_TC_PORT", "DOCKER_TC_BURST",
                     "DOCKER_TC_TBF_LATENCY", "DOCKER_TC_API_VERSION", "TC_RATE", "TC_DELAY",
                     "COMPOSE_PROJECT_NAME", "COMPOSE_FILE")
DEFAULTS = {"${RUN_CONFIG:-run.yaml}": "run.yaml", "${RUN_NAME:-run}": "run"}


def _workers(doc: dict) -> dict[str, dict]:
    return {name: svc for name, svc in doc["services"].items()
            if re.fullmatch(r"worker-\d+", name)}


def _rate_label(goodput_bps: float) -> str:
    """The docker-tc limit label: tc's frame rate for this goodput (netem/tc.py's rule)."""
    return "${TC_RATE:-" + f"{tc_rate_bps(LinkSetting(goodput_bps, 0.0))}bit" + "}"


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_shipped_compose_is_render_compose_4():
    assert SHIPPED.read_text() == render_compose(4), (
        "docker/compose.yaml drifted from decobench.netem.compose.render_compose(4): regenerate it with "
        "python -m decobench.netem.compose --workers 4 --out docker/compose.yaml")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_n_workers_with_distinct_node_ranks_and_docker_tc_labels(n):
    doc = yaml.safe_load(render_compose(n, shaper="docker-tc"))
    workers = _workers(doc)
    assert sorted(workers) == sorted(f"worker-{i}" for i in range(n))
    ranks = []
    for name, svc in workers.items():
        cmd = svc["command"]
        assert cmd[:1] == ["torchrun"] and cmd[cmd.index("-m") + 1] == "decobench.emulated"
        assert _flag(cmd, "--nnodes") == str(n) and _flag(cmd, "--nproc-per-node") == "1"
        assert _flag(cmd, "--master-addr") == "worker-0"
        assert _flag(cmd, "--master-port") == "29500"
        assert _flag(cmd, "--workers") == str(n)
        assert _flag(cmd, "--latency-mechanism") == "kernel"
        assert _flag(cmd, "--node-rank") == name.removeprefix("worker-")
        ranks.append(int(_flag(cmd, "--node-rank")))
        assert svc["hostname"] == name
        assert svc["container_name"] == "${DECOBENCH_PREFIX:-decobench}-" + name
        assert svc["networks"] == ["wan"]
        labels = svc["labels"]
        assert labels["com.docker-tc.enabled"] == "1"
        assert labels["com.docker-tc.limit"] == _rate_label(20e6)
        assert labels["com.docker-tc.delay"] == "${TC_DELAY:-100000us}"
        assert svc["depends_on"]["data"] == {"condition": "service_completed_successfully"}
        assert "${RESULTS:-results}:/results" in svc["volumes"]
        assert "--shaper-ready" not in cmd and "--probe" not in cmd  # docker-tc cannot say
    assert sorted(ranks) == list(range(n))
    assert doc["networks"]["wan"]["driver"] == "bridge"

    tc = doc["services"]["docker-tc"]
    assert tc["network_mode"] == "host" and tc["cap_add"] == ["NET_ADMIN"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in tc["volumes"]
    assert tc["environment"]["HTTP_PORT"] == "${DOCKER_TC_PORT:-4080}"

    player = doc["services"]["player"]
    cmd = player["command"]
    assert cmd[:3] == ["python", "-m", "decobench.netem.player"]
    assert _flag(cmd, "--via") == "docker-tc"
    assert _flag(cmd, "--url") == "http://127.0.0.1:${DOCKER_TC_PORT:-4080}"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--container"] == [
        workers[f"worker-{i}"]["container_name"] for i in range(n)]
    assert _flag(cmd, "--start-file") == _flag(workers["worker-0"]["command"], "--start-file")
    assert _flag(cmd, "--trace") == _flag(workers["worker-0"]["command"], "--trace")
    assert player["network_mode"] == "host"
    assert set(player["depends_on"]) == {"docker-tc", *workers}


def test_labels_follow_the_trace_first_row_and_csv_traces_are_read_from_config(tmp_path):
    doc = yaml.safe_load(render_compose(2, trace="wan-200ms-lowbw-varying", loop=True,
                                        shaper="docker-tc"))
    labels = doc["services"]["worker-1"]["labels"]
    assert labels["com.docker-tc.delay"] == "${TC_DELAY:-209187us}"
    cmd = doc["services"]["worker-1"]["command"]
    assert "--trace-loop" in cmd and _flag(cmd, "--trace") == "${TRACE:-wan-200ms-lowbw-varying}"
    assert "--loop" in doc["services"]["player"]["command"]

    csv = tmp_path / "my-link.csv"
    csv.write_text("time_s,bandwidth_mbps,latency_ms\n0,7.5,42\n10,3,80\n")
    assert container_trace(str(csv)) == "/config/my-link.csv"
    assert container_trace("constant-1gbps-10ms.csv") == "constant-1gbps-10ms"
    doc = yaml.safe_load(render_compose(2, trace=str(csv), shaper="docker-tc"))
    labels = doc["services"]["worker-0"]["labels"]
    assert labels["com.docker-tc.limit"] == _rate_label(7.5e6)
    assert labels["com.docker-tc.delay"] == "${TC_DELAY:-42000us}"
    assert _flag(doc["services"]["player"]["command"], "--trace") == "${TRACE:-/config/my-link.csv}"


def test_tc_shaper_gpus_and_bad_arguments():
    assert render_compose(3, gpus=2) == render_compose(3, shaper="tc", gpus=2)  # the default
    doc = yaml.safe_load(render_compose(3, shaper="tc", gpus=2))
    assert "docker-tc" not in doc["services"] and "player" not in doc["services"]
    for i in range(3):
        worker = doc["services"][f"worker-{i}"]
        assert "labels" not in worker and "docker-tc" not in worker["depends_on"]
        assert worker["image"] == "${DECOBENCH_IMAGE:-decobench:cuda}"
        devices = worker["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"capabilities": ["gpu"], "device_ids": [str(i % 2)]}]
        shaper = doc["services"][f"shaper-{i}"]
        assert shaper["network_mode"] == f"service:worker-{i}"
        assert shaper["cap_add"] == ["NET_ADMIN"]
        assert shaper["command"][shaper["command"].index("--via"):][:4] == [
            "--via", "tc", "--dev", "eth0"]
        # the worker waits for its own shaper's ready file, then probes the ring
        ready = "/results/${RUN_NAME:-run}.shaped-" + str(i)
        assert _flag(shaper["command"], "--ready-file") == ready
        assert _flag(worker["command"], "--shaper-ready") == ready
        assert "--probe" in worker["command"]
    for bad in ({"workers": 0}, {"shaper": "iptables"}, {"gpus": -1}, {"prefix": "bad name"},
                {"master_port": 0}):
        with pytest.raises(ValueError):
            render_compose(**{"workers": 2, **bad})


def test_cli_writes_the_file_and_explains_itself(tmp_path, capsys):
    out = tmp_path / "sub" / "compose-2.yaml"
    assert main(["--workers", "2", "--out", str(out)]) == 0
    assert out.read_text() == render_compose(2)
    assert main(["-n", "3"]) == 0
    assert capsys.readouterr().out == render_compose(3)
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    help_text = capsys.readouterr().out
    assert "--workers" in help_text and "--shaper" in help_text and "docs/docker.md" in help_text
    with pytest.raises(SystemExit) as exc:
        main(["--workers", "0"])
    assert exc.value.code == 2


def test_run_yaml_is_a_valid_run_config_and_the_worker_command_parses():
    from decobench.runs.config import build_run_config, load_yaml_config
    from decobench.runs.runner import prepare

    run = prepare(build_run_config(load_yaml_config(DOCKER / "run.yaml")))
    assert (run.config.task, run.config.method, run.config.workers) == ("cnn-fmnist",
                                                                        "deco-sgd", 4)
    assert run.config.trace == "constant-20mbps-100ms" and run.download

    entry = pytest.importorskip("decobench.emulated.entry")
    cmd = yaml.safe_load(SHIPPED.read_text())["services"]["worker-3"]["command"]
    argv = cmd[cmd.index("decobench.emulated") + 1:]
    for var, value in {**DEFAULTS, "${TRACE:-constant-20mbps-100ms}": "x"}.items():
        argv = [a.replace(var, value) for a in argv]
    args = entry.build_parser(argv).parse_args(argv)
    assert (args.config, args.out, args.start_file) == ("/config/run.yaml", "/results/run",
                                                        "/results/run.start")
    assert (args.workers, args.trace, args.latency_mechanism) == (4, "x", "kernel")
    assert (args.shaper_ready, args.probe) == ("/results/run.shaped-3", True)


@pytest.mark.skipif(not FMNIST_MINI.is_dir(), reason=f"no offline data slice at {FMNIST_MINI}")
def test_data_service_command_loads_the_task_data(tmp_path, capsys):
    from decobench.cli.main import main as decobench

    config = tmp_path / "run.yaml"
    config.write_text(f"task: cnn-fmnist\nmethod: d-sgd\ndata_root: {FMNIST_MINI}\n")
    command = yaml.safe_load(render_compose(4))["services"]["data"]["command"]
    assert command[:4] == list(DATA_COMMAND) and command[4].startswith("/config/")
    assert decobench([*DATA_COMMAND[1:], str(config)]) == 0
    assert "data for cnn-fmnist: ready" in capsys.readouterr().out
    config.write_text(f"task: cnn-fmnist\ndata_root: {tmp_path / 'nothing'}\n")
    assert decobench([*DATA_COMMAND[1:], str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error:") and "nothing" in err[0]


def test_dockerfile_installs_every_package_and_keeps_the_entry_point():
    text = (DOCKER / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python >= 3.11")
    mapping = tomllib.loads(pyproject)["tool"]["setuptools"]["package-dir"]
    assert sorted(mapping.values()) == ["baselines", "benchmark", "netem", "reports"]
    for folder in mapping.values():
        assert f"COPY {folder} ./{folder}" in text, f"docker/Dockerfile misses {folder}/"
    assert "iproute2" in text and "ARG VARIANT=cpu" in text
    assert 'ENTRYPOINT ["decobench-entrypoint"]' in text
    assert "download.pytorch.org/whl/cpu" in text


def _compose_config(path: Path, env: dict[str, str] | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_VARIABLES}
    result = subprocess.run(["docker-compose", "-f", str(path), "config"], capture_output=True,
                            text=True, env={**clean, **(env or {})}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "WARN" not in result.stderr, result.stderr   # e.g. a variable without a default
    return yaml.safe_load(result.stdout)


@pytest.mark.skipif(shutil.which("docker-compose") is None,
                    reason="docker-compose (Compose v1.29, Debian package docker-compose) is "
                    "not on PATH; `apt-get install docker-compose` to validate the files")
def test_docker_compose_config_validates_shipped_and_generated_files(tmp_path):
    shipped = _compose_config(SHIPPED)
    worker = shipped["services"]["worker-0"]
    assert worker["container_name"] == "decobench-worker-0"
    assert worker["image"] == "decobench:cpu"
    assert "labels" not in worker and "--probe" in worker["command"]  # the tc sidecars
    assert shipped["services"]["shaper-0"]["network_mode"] == "service:worker-0"
    assert shipped["volumes"]["results"]["name"] == "decobench-results"
    assert f"{DOCKER}:/config:ro" in worker["volumes"]

    generated = tmp_path / "compose-2.yaml"
    generated.write_text(render_compose(2, trace="wan-100mbps-steps", shaper="docker-tc"))
    doc = _compose_config(generated, {"DECOBENCH_PREFIX": "exp7", "RUN_NAME": "r1",
                                      "RESULTS": "./out"})
    assert sorted(_workers(doc)) == ["worker-0", "worker-1"]
    player = doc["services"]["player"]["command"]
    assert [player[i + 1] for i, a in enumerate(player) if a == "--container"] == [
        "exp7-worker-0", "exp7-worker-1"]
    assert _flag(player, "--trace") == "wan-100mbps-steps"
    assert _flag(player, "--start-file") == "/results/r1.start"
    assert f"{tmp_path}/out:/results:rw" in doc["services"]["worker-1"]["volumes"]

    tc_gpu = tmp_path / "compose-tc.yaml"
    tc_gpu.write_text(render_compose(2, shaper="tc", gpus=1))
    doc = _compose_config(tc_gpu)
    assert doc["services"]["shaper-1"]["network_mode"] == "service:worker-1"


def test_player_command_parses_when_the_player_exists():
    player = pytest.importorskip("decobench.netem.player", reason="decobench.netem.player is not written yet")
    if not hasattr(player, "build_parser"):
        pytest.skip("decobench.netem.player has no build_parser() to check the command line with")
    doc = yaml.safe_load(render_compose(2, shaper="docker-tc"))
    argv = doc["services"]["player"]["command"][3:]
    for var, value in {**DEFAULTS, "${TRACE:-constant-20mbps-100ms}": "constant-20mbps-100ms",
                       "${DOCKER_TC_PORT:-4080}": "4080",
                       "${DECOBENCH_PREFIX:-decobench}": "decobench"}.items():
        argv = [a.replace(var, value) for a in argv]
    player.build_parser().parse_args(argv)
    tc_doc = yaml.safe_load(render_compose(2, shaper="tc"))
    argv = [a.replace("${TRACE:-constant-20mbps-100ms}", "constant-20mbps-100ms")
            .replace("${RUN_NAME:-run}", "run")
            for a in tc_doc["services"]["shaper-0"]["command"][3:]]
    player.build_parser().parse_args(argv)
