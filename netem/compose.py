"""Docker Compose files for an emulated run with n worker containers (``docs/docker.md``).

Compose cannot loop over a count, so this module writes the file: ``render_compose(n)`` is a
pure function of its arguments, and ``docker/compose.yaml`` is exactly ``render_compose(4)``
(``tests/test_docker_compose.py`` checks that they never drift)::

    python -m decobench.netem.compose --workers 8 --out docker/compose-8.yaml

The file's services:

``data``
    One-shot: downloads the task's data set into the ``data`` volume (or checks
    ``data_root``) before any worker starts, so n workers never download into one folder
    at once. The workers wait for it to exit successfully.
``docker-tc``
    lukaszlach/docker-tc (https://github.com/lukaszlach/docker-tc): shapes each labelled
    container's link from the host side, with netem (delay) and tbf (rate) on the host end
    of the container's veth pair, that is on the traffic *into* the container. Its README
    ("Running") asks for the host network, NET_ADMIN and the Docker socket; its HTTP API
    listens on ``HTTP_BIND:HTTP_PORT`` (default 127.0.0.1:4080).
``worker-0`` .. ``worker-{n-1}``
    ``torchrun --nnodes n --node-rank i --nproc-per-node 1 --master-addr worker-0
    --master-port 29500 -m decobench.emulated ... --latency-mechanism kernel`` on a
    user-defined bridge network (docker-tc finds a container's veth through the network's
    ``br-<id>`` bridge, which the default ``docker0`` bridge does not have). The docker-tc
    labels give the trace's first row, so the links are shaped from the first packet.
``player``
    ``python -m decobench.netem.player --via docker-tc`` on the host network (docker-tc's API is
    bound to the host's loopback): waits for rank 0's start file, then POSTs each trace row
    to docker-tc for every worker container as the row comes due.

With ``shaper="tc"`` there is no docker-tc: each worker gets a sidecar ``shaper-i`` that
shares its network namespace (``network_mode: service:worker-i``), has NET_ADMIN, and runs
``python -m decobench.netem.player --via tc --dev eth0``: tc inside the container, shaping the
worker's egress.

Container names are fixed (``container_name: ${DECOBENCH_PREFIX:-decobench}-worker-i``):
docker-tc and the player address containers by name, and Compose's own names differ between
Compose v1 (``<project>_worker-0_1``) and v2 (``<project>-worker-0-1``) and depend on the
project name (the folder, ``-p`` or ``COMPOSE_PROJECT_NAME``). Set ``DECOBENCH_PREFIX`` to
run two stacks on one host.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from decobench.netem.tcp import HOST_CHANGES_ENV

DEFAULT_WORKERS = 4
DEFAULT_TRACE = "constant-20mbps-100ms"
DEFAULT_PREFIX = "decobench"
DEFAULT_MASTER_PORT = 29500
DEFAULT_DOCKER_TC_PORT = 4080
DEFAULT_DOCKER_TC_IMAGE = "lukaszlach/docker-tc"
CPU_IMAGE = "decobench:cpu"
CUDA_IMAGE = "decobench:cuda"
SHAPERS: tuple[str, ...] = ("tc", "docker-tc")
DEFAULT_SHAPER = "tc"

CONFIG_MOUNT = "/config"
RESULTS_MOUNT = "/results"
CACHE_MOUNT = "/root/.cache"
"""Where downloads land in the image (root's home): ``~/.cache/decobench/data`` for
torchvision data sets, ``~/.cache/huggingface`` for WikiText and tokenizers."""

DATA_COMMAND = ("decobench", "data", "fetch", "--config")
"""The ``data`` service's command (followed by the run config's path): loads the task's data
once, downloading it when the run config has no ``data_root``."""

_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def _env(name: str, default: Any) -> str:
    """``${NAME:-default}``: Compose interpolation, the same in Compose v1 and v2."""
    return "${" + name + ":-" + str(default) + "}"


def _trace_rows(trace: str) -> tuple[float, float, float, float]:
    """(first rate, first latency, highest rate, highest latency) of ``trace``, in bit/s
    and seconds; ``trace`` is a bundled name or a CSV path."""
    from decobench.netem.trace import load_trace

    loaded = load_trace(trace)
    return (loaded.bandwidth_bps[0], loaded.latency_s[0], max(loaded.bandwidth_bps),
            max(loaded.latency_s))


def container_trace(trace: str) -> str:
    """The trace as the containers name it: a bundled name stays; a CSV path becomes
    ``/config/<file name>`` (the file must sit in CONFIG_DIR, mounted at /config)."""
    path = Path(trace)
    if path.is_file():
        return f"{CONFIG_MOUNT}/{path.name}"
    return path.stem if path.suffix == ".csv" else trace


def _docker_tc_settings(trace: str) -> dict[str, str]:
    """docker-tc label values for the trace's first row, and its tbf sizes for the trace.

    The same rules as ``decobench.netem.tc`` (used by the trace player): tc's rate is the goodput
    times the TCP/IP framing factor, in bit/s (tc's ``mbps`` would mean megabytes); the
    delay is the one-way latency in microseconds; the token bucket holds one timer tick at
    the trace's highest rate and queues ``2·b + 50 ms`` at its highest latency.
    """
    from decobench.netem.tc import QUEUE_HEADROOM_S, LinkSetting, burst_bytes, tc_rate_bps

    rate, latency, top_rate, top_latency = _trace_rows(trace)
    first = LinkSetting(rate_bps=rate, latency_s=latency)
    top = tc_rate_bps(LinkSetting(rate_bps=top_rate, latency_s=top_latency))
    queue_ms = math.ceil((2 * top_latency + QUEUE_HEADROOM_S) * 1e3)
    return {"limit": f"{tc_rate_bps(first)}bit", "delay": f"{round(latency * 1e6)}us",
            "burst": str(burst_bytes(top)), "tbf_latency": f"{queue_ms}ms"}


def _tcp_sysctls(trace: str) -> dict[str, str]:
    """The workers' TCP sysctls (decobench.netem.tcp), buffers sized for the trace's highest
    rate and latency."""
    from decobench.netem.tcp import buffer_bytes, sysctl_values

    _, _, top_rate, top_latency = _trace_rows(trace)
    return sysctl_values(buffer_bytes(top_rate, top_latency))


def ready_file(i: int) -> str:
    """Where shaper-i's trace player says worker i's link is shaped (``--ready-file``)."""
    return f"{RESULTS_MOUNT}/{_env('RUN_NAME', 'run')}.shaped-{i}"


def _worker_command(i: int, workers: int, *, master_port: int, trace: str, run_config: str,
                    trace_loop: bool, sidecar: bool) -> list[str]:
    run = _env("RUN_NAME", "run")
    command = [
        "torchrun", "--nnodes", str(workers), "--node-rank", str(i), "--nproc-per-node", "1",
        "--master-addr", "worker-0", "--master-port", str(master_port),
        "-m", "decobench.emulated",
        "--config", f"{CONFIG_MOUNT}/{_env('RUN_CONFIG', run_config)}",
        "--out", f"{RESULTS_MOUNT}/{run}",
        "--workers", str(workers),
        "--trace", _env("TRACE", trace),
        "--latency-mechanism", "kernel",
        "--start-file", f"{RESULTS_MOUNT}/{run}.start",
    ]  # fmt: skip
    if trace_loop:
        command.append("--trace-loop")
    if sidecar:  # wait until the sidecar has shaped this link, then probe the ring
        command += ["--shaper-ready", ready_file(i), "--probe"]
    return command


def render_compose(
    workers: int = DEFAULT_WORKERS,
    *,
    image: str | None = None,
    trace: str = DEFAULT_TRACE,
    loop: bool = False,
    shaper: Literal["tc", "docker-tc"] = DEFAULT_SHAPER,
    gpus: int = 0,
    prefix: str = DEFAULT_PREFIX,
    master_port: int = DEFAULT_MASTER_PORT,
    docker_tc_port: int = DEFAULT_DOCKER_TC_PORT,
    config_dir: str = ".",
    run_config: str = "run.yaml",
) -> str:
    """The Compose file (YAML text with a header comment) for ``workers`` containers.

    ``image``: the worker image (default ``decobench:cpu``, or ``decobench:cuda`` when
    ``gpus`` > 0). ``trace``: bundled name or CSV path; its first row becomes the docker-tc
    labels and it is what the player plays (``loop``: loop it). ``shaper``: ``docker-tc``
    (host-side, driven over its HTTP API) or ``tc`` (a NET_ADMIN sidecar per worker).
    ``gpus``: GPUs on the host; worker i reserves GPU ``i mod gpus`` (0: CPU only).
    ``prefix``: container, network and volume names start with it. ``config_dir``: the host
    folder mounted at /config (relative to the compose file), holding ``run_config``.
    Every one of these is also a Compose variable with this value as its default (see the
    header), so a user changes them without editing the file.
    """
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if shaper not in SHAPERS:
        raise ValueError(f"shaper must be one of {', '.join(SHAPERS)}, got {shaper!r}")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise ValueError(f"gpus must be an integer >= 0, got {gpus!r}")
    if not _NAME.match(prefix):
        raise ValueError(f"prefix must match {_NAME.pattern} (a container name), got {prefix!r}")
    for name, port in (("master_port", master_port), ("docker_tc_port", docker_tc_port)):
        if not 1 <= port <= 65535:
            raise ValueError(f"{name} must be in 1..65535, got {port!r}")
    image = image or (CUDA_IMAGE if gpus else CPU_IMAGE)
    tc = _docker_tc_settings(trace)
    tcp_sysctls = _tcp_sysctls(trace)
    trace_in_container = container_trace(trace)

    name = _env("DECOBENCH_PREFIX", prefix)
    img = _env("DECOBENCH_IMAGE", image)
    config_volume = f"{_env('CONFIG_DIR', config_dir)}:{CONFIG_MOUNT}:ro"
    results_volume = f"{_env('RESULTS', 'results')}:{RESULTS_MOUNT}"
    cache_volume = f"{_env('DATA', 'data')}:{CACHE_MOUNT}"
    start_file = f"{RESULTS_MOUNT}/{_env('RUN_NAME', 'run')}.start"
    worker_names = [f"{name}-worker-{i}" for i in range(workers)]
    docker_tc = shaper == "docker-tc"

    services: dict[str, Any] = {}
    services["data"] = {
        "image": img,
        "container_name": f"{name}-data",
        "command": [*DATA_COMMAND, f"{CONFIG_MOUNT}/{_env('RUN_CONFIG', run_config)}"],
        "volumes": [config_volume, cache_volume],
        "restart": "no",
    }
    if docker_tc:
        services["docker-tc"] = {
            "image": _env("DOCKER_TC_IMAGE", DEFAULT_DOCKER_TC_IMAGE),
            "container_name": f"{name}-docker-tc",
            "network_mode": "host",
            "cap_add": ["NET_ADMIN"],
            "volumes": ["/var/run/docker.sock:/var/run/docker.sock"],
            "environment": {
                "HTTP_BIND": "127.0.0.1",
                "HTTP_PORT": _env("DOCKER_TC_PORT", docker_tc_port),
                "QDISC_TBF_BURST": _env("DOCKER_TC_BURST", tc["burst"]),
                "QDISC_TBF_LATENCY": _env("DOCKER_TC_TBF_LATENCY", tc["tbf_latency"]),
                "DOCKER_API_VERSION": _env("DOCKER_TC_API_VERSION", ""),
            },
            "restart": "no",
        }
    for i in range(workers):
        worker: dict[str, Any] = {
            "image": img,
            "container_name": worker_names[i],
            "hostname": f"worker-{i}",
            "command": _worker_command(i, workers, master_port=master_port,
                                       trace=trace_in_container, run_config=run_config,
                                       trace_loop=loop, sidecar=not docker_tc),
            "environment": {
                "DECOBENCH_THREADS": _env("DECOBENCH_THREADS", 0),
                # host settings changed for this stack (python -m decobench.netem.tcp sets
                # it); rank 0 records them in network_probe.json
                HOST_CHANGES_ENV: _env(HOST_CHANGES_ENV, ""),
                "GLOO_SOCKET_IFNAME": "eth0",
                "NCCL_SOCKET_IFNAME": "eth0",
                "NCCL_IB_DISABLE": "1",
                "NCCL_P2P_DISABLE": "1",
                "NCCL_SHM_DISABLE": "1",
            },
            "networks": ["wan"],
            # TCP for a long fat network (decobench.netem.tcp): the window kept across the
            # pauses between messages, socket buffers for the trace's largest bandwidth-delay
            # product; the shaper sidecar sets the initial window on the routes and checks
            "sysctls": dict(tcp_sysctls),
            "volumes": [config_volume, results_volume, cache_volume],
            "shm_size": "1gb",
            "init": True,
            "restart": "no",
            "depends_on": {"data": {"condition": "service_completed_successfully"}},
        }
        if docker_tc:
            worker["labels"] = {
                "com.docker-tc.enabled": "1",
                "com.docker-tc.limit": _env("TC_RATE", tc["limit"]),
                "com.docker-tc.delay": _env("TC_DELAY", tc["delay"]),
            }
            worker["depends_on"]["docker-tc"] = {"condition": "service_started"}
        if i > 0:
            worker["depends_on"]["worker-0"] = {"condition": "service_started"}
        if gpus:
            # like `docker run --gpus device=K`: no driver, so the daemon picks the one with
            # the gpu capability (nvidia); valid for Compose v1.29 and the current spec alike
            worker["deploy"] = {"resources": {"reservations": {"devices": [
                {"capabilities": ["gpu"], "device_ids": [str(i % gpus)]}]}}}
        services[f"worker-{i}"] = worker

    def player_command(*via: str) -> list[str]:
        return (["python", "-m", "decobench.netem.player", "--trace", _env("TRACE", trace_in_container)]
                + (["--loop"] if loop else []) + list(via) + ["--start-file", start_file])

    if docker_tc:
        via = ["--via", "docker-tc", "--url",
               f"http://127.0.0.1:{_env('DOCKER_TC_PORT', docker_tc_port)}"]
        for container in worker_names:
            via += ["--container", container]
        services["player"] = {
            "image": img,
            "container_name": f"{name}-player",
            "network_mode": "host",
            "command": player_command(*via),
            "volumes": [config_volume, results_volume],
            "init": True,
            "restart": "no",
            "depends_on": {"docker-tc": {"condition": "service_started"},
                           **{f"worker-{i}": {"condition": "service_started"}
                              for i in range(workers)}},
        }
    else:
        for i in range(workers):
            services[f"shaper-{i}"] = {
                "image": img,
                "container_name": f"{name}-shaper-{i}",
                "network_mode": f"service:worker-{i}",
                "cap_add": ["NET_ADMIN"],
                "command": player_command("--via", "tc", "--dev", "eth0",
                                          "--ready-file", ready_file(i)),
                "volumes": [config_volume, results_volume],
                "init": True,
                "restart": "no",
                "depends_on": {f"worker-{i}": {"condition": "service_started"}},
            }

    document = {
        "services": services,
        "networks": {"wan": {"name": f"{name}-wan", "driver": "bridge"}},
        "volumes": {"results": {"name": f"{name}-results"}, "data": {"name": f"{name}-data"}},
    }
    return _header(workers, image=image, trace=trace, trace_in_container=trace_in_container,
                   loop=loop, shaper=shaper, gpus=gpus, prefix=prefix, tc=tc,
                   config_dir=config_dir, run_config=run_config,
                   docker_tc_port=docker_tc_port) + _dump(document)


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings as literal blocks, lists indented under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=100, allow_unicode=True)


def _header(workers: int, *, image: str, trace: str, trace_in_container: str, loop: bool,
            shaper: str, gpus: int, prefix: str, tc: dict[str, str], config_dir: str,
            run_config: str, docker_tc_port: int) -> str:
    flags = [f"--workers {workers}"]
    if image != (CUDA_IMAGE if gpus else CPU_IMAGE):
        flags.append(f"--image {image}")
    if trace != DEFAULT_TRACE:
        flags.append(f"--trace {trace}")
    if loop:
        flags.append("--loop")
    if shaper != DEFAULT_SHAPER:
        flags.append(f"--shaper {shaper}")
    if gpus:
        flags.append(f"--gpus {gpus}")
    if prefix != DEFAULT_PREFIX:
        flags.append(f"--prefix {prefix}")
    if config_dir != ".":
        flags.append(f"--config-dir {config_dir}")
    if run_config != "run.yaml":
        flags.append(f"--run-config {run_config}")
    if docker_tc_port != DEFAULT_DOCKER_TC_PORT:
        flags.append(f"--docker-tc-port {docker_tc_port}")
    shaping = (
        f"""#   docker-tc  lukaszlach/docker-tc on the host network with NET_ADMIN and the Docker
#              socket (its README, "Running"; its docker-compose.yml). It shapes every container
#              labelled com.docker-tc.enabled=1 when the container starts: netem delay from
#              com.docker-tc.delay, then tbf rate from com.docker-tc.limit (units as in
#              tc(8): bit, kbit, mbit = bits/s; kbps, mbps = BYTES/s), on the host end of the
#              container's veth, i.e. traffic into the container. Its HTTP API listens on
#              127.0.0.1:$DOCKER_TC_PORT (README "HTTP API"); POST /<container-name> with body
#              rate=...&delay=... replaces a container's rules (bin/http-post.sh).
#   (labels)   worker-i's docker-tc labels = the trace's first row: limit {tc['limit']} (tc rate, goodput x 1514/1448
#              for TCP/IP framing, as netem/tc.py), delay {tc['delay']} (one-way latency).
#   player     python -m decobench.netem.player --via docker-tc, on the host network so that it reaches
#              docker-tc's API on 127.0.0.1; it waits for rank 0 to write
#              /results/$RUN_NAME.start, then POSTs each trace row to every worker.
"""
        if shaper == "docker-tc" else
        """#   shaper-i   python -m decobench.netem.player --via tc --dev eth0 in worker-i's network namespace
#              (network_mode: service:worker-i) with NET_ADMIN: htb (rate) on the worker's
#              egress, the latency by netem or, on kernels without it, an NFQUEUE delayer
#              on its received packets; each setting is read back from tc. Once the link is
#              shaped it writes /results/$RUN_NAME.shaped-i (the mechanism in use), then
#              waits for /results/$RUN_NAME.start and plays the trace; under NFQUEUE it
#              keeps running (holding the delay) until stopped.
#   (workers)  wait for their shaper's file (--shaper-ready), refuse a mechanism that
#              disagrees with --latency-mechanism kernel, and --probe every ring link
#              (goodput and round trip within 10% of the trace's first row, else the run
#              fails naming the link; network_probe.json in the run directory).
"""
    )
    docker_tc = shaper == "docker-tc"
    labels_note = (" Regenerate with --trace to\n#                     move the first-row labels "
                   "too, or set TC_RATE / TC_DELAY." if docker_tc else "")
    docker_tc_vars = (
        f"""#   DOCKER_TC_IMAGE, DOCKER_TC_PORT ({docker_tc_port}), DOCKER_TC_BURST ({tc['burst']} bytes),
#   DOCKER_TC_TBF_LATENCY ({tc['tbf_latency']}), DOCKER_TC_API_VERSION (docker-tc's Docker CLI API
#                     version, e.g. 1.44 for Docker Engine >= 29), TC_RATE, TC_DELAY
""" if docker_tc else "")
    by_name = "docker-tc and the player" if docker_tc else "docker wait and docker cp above"
    gpu_note = (f"#   GPUs: worker i reserves GPU (i mod {gpus}) through "
                "deploy.resources.reservations.devices.\n" if gpus else "")
    return f"""\
# decobench: an emulated run with {workers} worker containers ({shaper} shaping). GENERATED by
#   python -m decobench.netem.compose {' '.join(flags)}
# Do not edit by hand: regenerate (the test suite checks docker/compose.yaml against
# decobench.netem.compose.render_compose(4)). Guide: docs/docker.md.
#
# Start (from the folder of this file; Compose v2, or docker-compose >= 1.29 for v1):
#   docker compose up -d && docker wait {prefix}-worker-0
#   docker cp {prefix}-worker-0:/results/run ./run      # the run directory
#   docker compose down -v                              # removes containers and volumes
#
# Services:
#   data       one-shot: downloads the task's data into the data volume (or checks
#              data_root) before the workers start; they wait for it to succeed.
#   worker-i   torchrun --nnodes {workers} --node-rank i --nproc-per-node 1 --master-addr worker-0
#              --master-port 29500 -m decobench.emulated --config /config/$RUN_CONFIG
#              --out /results/$RUN_NAME --latency-mechanism kernel (torch.distributed static
#              rendezvous: rank i = node rank i); on the user-defined bridge network "wan".
{shaping}{gpu_note}#
# Variables (environment or a .env file next to this file; default after ":-"):
#   DECOBENCH_IMAGE   worker image ({image}; docker/Dockerfile builds decobench:cpu/cuda)
#   TRACE             bundled trace name or /config/FILE.csv ({trace_in_container}); the workers
#                     get --trace $TRACE, which overrides run.yaml.{labels_note}
#   RUN_CONFIG        run config file in CONFIG_DIR ({run_config})
#   CONFIG_DIR        host folder mounted read-only at /config ({config_dir}: this file's folder)
#   RUN_NAME          run directory /results/$RUN_NAME (run)
#   RESULTS           volume name or host path mounted at /results (results: the volume
#                     {prefix}-results; e.g. RESULTS=./results for a folder here)
#   DATA              volume name or host path for the download cache /root/.cache (data)
#   DECOBENCH_PREFIX  container, network and volume name prefix ({prefix})
#   DECOBENCH_THREADS torch threads per worker (0: the backend's default, all cores)
#   DECOBENCH_HOST_CHANGES  host settings changed for this stack, recorded by the workers
#                     (set by python -m decobench.netem.tcp -- docker compose ... up -d)
{docker_tc_vars}#
# Container names are fixed ($DECOBENCH_PREFIX-worker-i): {by_name} address
# containers by name, and Compose's generated names differ between v1 and v2.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.compose",
        description="Write a Docker Compose file for an emulated decobench run with N worker "
        "containers: a one-shot data download, a trace-player sidecar per worker (or docker-tc) "
        "shaping "
        "each worker's link from a bandwidth/latency trace, N torchrun workers running "
        "python -m decobench.emulated, and the trace player. Every choice below is also a "
        "Compose variable in the file, so it can be changed later without editing.",
        epilog="examples:\n"
        "  python -m decobench.netem.compose --workers 8 --out docker/compose-8.yaml\n"
        "  python -m decobench.netem.compose --workers 4 --trace wan-200ms-lowbw-varying --loop \\\n"
        "      --out docker/compose-wan.yaml\n"
        "  python -m decobench.netem.compose --workers 4 --gpus 4 --out docker/compose-gpu.yaml\n"
        "  python -m decobench.netem.compose --workers 4 --shaper docker-tc \\\n"
        "      --out docker/compose-docker-tc.yaml   # kernels with sch_netem only\n\n"
        "Write the file next to docker/run.yaml (the default --config-dir '.' is the compose "
        "file's folder), then: docker compose -f docker/compose-8.yaml up -d. "
        "docker/compose.yaml is this command's output for --workers 4. See docs/docker.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", "-n", type=int, default=DEFAULT_WORKERS, metavar="N",
                        help=f"number of worker containers (default {DEFAULT_WORKERS})")
    parser.add_argument("--out", "-o", metavar="FILE",
                        help="write the compose file here (default: standard output)")
    parser.add_argument("--trace", default=DEFAULT_TRACE, metavar="NAME|CSV",
                        help="bundled trace name or CSV file (default %(default)s); its first "
                        "row becomes the docker-tc labels. A CSV file must sit in the "
                        "config folder, where the containers see it as /config/FILE")
    parser.add_argument("--loop", action="store_true",
                        help="loop the trace (player --loop, workers --trace-loop)")
    parser.add_argument("--shaper", choices=SHAPERS, default=DEFAULT_SHAPER,
                        help="tc (default): a NET_ADMIN sidecar per worker runs the trace "
                        "player in the worker's network namespace (htb, and netem or an "
                        "NFQUEUE delayer where the kernel has no netem), each setting read "
                        "back, the links probed before training; docker-tc: "
                        "lukaszlach/docker-tc shapes each container from the host over its "
                        "HTTP API (needs sch_netem: upstream always adds a netem qdisc)")
    parser.add_argument("--gpus", type=int, default=0, metavar="G",
                        help="GPUs on the host; worker i reserves GPU i mod G (default 0: CPU "
                        f"only). Also switches the default image to {CUDA_IMAGE}")
    parser.add_argument("--image", metavar="IMAGE",
                        help=f"worker image (default {CPU_IMAGE}, or {CUDA_IMAGE} with --gpus)")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help="container, network and volume name prefix (default %(default)s)")
    parser.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT, metavar="PORT",
                        help="torchrun rendezvous port on worker-0 (default %(default)s)")
    parser.add_argument("--docker-tc-port", type=int, default=DEFAULT_DOCKER_TC_PORT,
                        metavar="PORT", help="docker-tc's HTTP API port on the host's loopback "
                        "(default %(default)s)")
    parser.add_argument("--config-dir", default=".", metavar="DIR",
                        help="host folder mounted at /config, relative to the compose file "
                        "(default '.': the compose file's own folder)")
    parser.add_argument("--run-config", default="run.yaml", metavar="FILE",
                        help="run config file name inside the config folder (default "
                        "%(default)s)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from decobench.errors import DecobenchError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        text = render_compose(
            args.workers, image=args.image, trace=args.trace, loop=args.loop,
            shaper=args.shaper, gpus=args.gpus, prefix=args.prefix,
            master_port=args.master_port, docker_tc_port=args.docker_tc_port,
            config_dir=args.config_dir, run_config=args.run_config)
    except (ValueError, DecobenchError) as exc:
        parser.error(str(exc))
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    trace_note = ""
    if container_trace(args.trace) != args.trace:
        trace_note = (f"; copy {args.trace} into the config folder: the containers read it "
                      f"as {container_trace(args.trace)}")
    print(f"wrote {out} ({args.workers} workers, {args.shaper}){trace_note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
