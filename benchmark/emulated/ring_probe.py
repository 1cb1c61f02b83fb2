"""The pre-training link probe run by the ranks themselves (``python -m decobench.emulated --probe``).

Where the launcher owns the links (``decobench run --backend emulated``) it probes them
from outside before the ranks start (:func:`decobench.netem.probe.probe_links`). Where it
does not (Docker containers shaped by the trace player's sidecars, a user's own hosts),
the ranks probe their ring links i -> (i+1) mod n with the same agents and the same checks
(module docstring of :mod:`decobench.netem.probe`): each rank runs the receiver in a thread
on its own address and the sender towards the next rank; torch.distributed only exchanges
the addresses and the results, and a barrier holds every bulk transfer until all pings are
done. The setting is the trace's first row, played before trace time 0 starts.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from typing import Any

import torch.distributed as dist

from decobench.errors import DecobenchError
from decobench.netem.probe import (
    PROBE_PORT,
    ProbeReport,
    evaluate_link,
    send,
    serve,
    warmup_seconds,
)
from decobench.netem.tc import LinkSetting


def own_address(master_addr: str, master_port: int) -> str:
    """The address this host reaches the rendezvous from (the interface the collectives
    use): the source address of a UDP socket connected towards it (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master_addr, master_port))
        return str(probe.getsockname()[0])


def probe_ring(rank: int, world: int, address: str, setting: LinkSetting, mechanism: str,
               *, tolerance: float = 0.10, measure_s: float = 1.5, pings: int = 10,
               port: int = PROBE_PORT) -> ProbeReport:
    """Measure every ring link against ``setting``; every rank returns the whole report.

    ``address``: this rank's (:func:`own_address`); rank r listens on ``port + r`` so that
    ranks sharing a host do not collide. Collective: every rank must call it.
    """
    addresses: list[Any] = [None] * world
    dist.all_gather_object(addresses, address)
    if world < 2:
        return ProbeReport(setting, mechanism, tolerance, (), 0.0)
    warmup = warmup_seconds(setting, mechanism)
    planned = warmup + measure_s
    nbytes = math.ceil(setting.rate_bps / 8 * planned)
    max_s = 4 * planned + 2
    nxt = (rank + 1) % world
    received: dict[str, Any] = {}
    listening = threading.Event()

    def receive() -> None:
        try:
            received["goodput"] = serve(address, port + rank, warmup, max_s, ready=listening.set)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            received["error"] = repr(exc)
            listening.set()

    receiver = threading.Thread(target=receive, name="ring-probe-receiver", daemon=True)
    receiver.start()
    listening.wait(30)
    dist.barrier()
    started = time.monotonic()

    pinged: list[bool] = []

    def all_pinged(_rtts: list[float]) -> bool:
        dist.barrier()       # no bulk transfer starts before every ping is back
        pinged.append(True)
        return True

    try:
        rtts = send(addresses[nxt], port + nxt, pings, nbytes, max_s, go=all_pinged)
        sent_error = None
    except OSError as exc:
        rtts, sent_error = [], f"sending to rank {nxt} at {addresses[nxt]}: {exc!r}"
        if not pinged:
            dist.barrier()   # the others wait there
    receiver.join(max_s + 30)
    got_error = received.get("error") or (
        None if "goodput" in received else f"no transfer arrived within {max_s + 30:g} s")
    mine = {"rtts_s": rtts, "goodput": received.get("goodput"), "error": sent_error or got_error}
    results: list[Any] = [None] * world
    dist.all_gather_object(results, mine)
    failed = [f"rank {r}: {res['error']}" for r, res in enumerate(results) if res["error"]]
    if failed:
        raise DecobenchError("the ranks could not probe their links: " + "; ".join(failed))
    links = tuple(
        evaluate_link(r, (r + 1) % world, (addresses[r], addresses[(r + 1) % world]), setting,
                      mechanism, tolerance, results[(r + 1) % world]["goodput"],
                      results[r]["rtts_s"])
        for r in range(world))
    return ProbeReport(setting, mechanism, tolerance, links, time.monotonic() - started)
