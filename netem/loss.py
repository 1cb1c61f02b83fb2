"""Packet loss and link outages without ``sch_netem``: iptables rules on the receive side.

Random loss: an iptables ``statistic`` rule.

``iptables -w -I INPUT 1 -i eth0 -m statistic --mode random --probability P -j DROP`` drops
each packet received on ``eth0`` with probability ``P`` (data and ACKs alike, before the
NFQUEUE delayer, whose rule it precedes). On the emulated network each packet crosses one
worker's receive side, so ``P`` is the loss rate of every link. The rule is read back
(:func:`check_loss_readback`) after it is set: a rule that is not there, or has another
probability, stops the run.

Outages: a trace row whose bandwidth is below :data:`OUTAGE_BPS` ("near zero") takes the
link down: ``iptables -w -I INPUT 1 -i eth0 -m comment --comment decobench-outage -j DROP``
drops everything the worker receives until the next row above it, and HTB keeps its last
rate. HTB cannot emulate such a rate itself: it charges a packet when it sends it, so one
1,514-byte frame at 1 kbit/s leaves the class 12 s in debt (up to HTB's 60 s cap, 190 s
for a 16-frame offload packet), and the debt outlives the rate change, so a 4-second outage
stalled a run for 60 s in our test. Dropping is what a link that is down does; TCP
retransmits when it comes back (after its retransmission timer, which backs off during the
outage), so the measured stall can exceed the outage by up to one backed-off timeout. The
simulated clock instead carries the transfer on at the row's (tiny) rate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from decobench.errors import DecobenchError
from decobench.netem.host import Delayer, ShapingMismatch
from decobench.netem.tc import LinkSetting, exec_in

OUTAGE_BPS: float = 64e3
"""Bandwidths (goodput, bit/s) below this are an outage: the link drops every packet."""

OUTAGE_COMMENT: str = "decobench-outage"
"""The comment that marks the outage rule (so it is found and removed by name)."""

MAX_LOSS: float = 0.5
"""Largest loss probability accepted (beyond it no TCP connection makes progress)."""


def check_probability(p: float) -> float:
    """``p`` if it is a finite number in [0, :data:`MAX_LOSS`), else ValueError."""
    if not (isinstance(p, (int, float)) and math.isfinite(p) and 0 <= p < MAX_LOSS):
        raise ValueError(f"packet loss must be a fraction in [0, {MAX_LOSS}), e.g. 0.01 for "
                         f"1%, got {p!r}")
    return float(p)


def _match(dev: str, probability: float) -> list[str]:
    return ["-i", dev, "-m", "statistic", "--mode", "random", "--probability",
            f"{probability:.11f}", "-j", "DROP"]


def loss_rule_commands(dev: str, probability: float, action: str = "add",
                       netns: str | None = None) -> list[list[str]]:
    """The iptables line that drops ``probability`` of the packets received on ``dev``
    (``add``: first rule of INPUT, ahead of the NFQUEUE delayer's) or removes it
    (``delete``)."""
    check_probability(probability)
    head = {"add": ["-I", "INPUT", "1"], "delete": ["-D", "INPUT"]}.get(action)
    if head is None:
        raise ValueError(f"unknown iptables action {action!r}; choose add or delete")
    return [[*exec_in(netns), "iptables", "-w", *head, *_match(dev, probability)]]


def readback_command(netns: str | None = None) -> list[str]:
    """``iptables -S INPUT``: what :func:`check_loss_readback` reads."""
    return [*exec_in(netns), "iptables", "-w", "-S", "INPUT"]


def check_loss_readback(rules: str, dev: str, probability: float) -> list[str]:
    """Problems with the loss rules of ``dev`` in ``iptables -S INPUT`` output, against
    ``probability`` (0: there must be none)."""
    found = [float(m.group(1)) for line in rules.splitlines()
             if f"-i {dev} " in line + " " and " -j DROP" in line
             for m in [re.search(r"--probability ([0-9.eE+-]+)", line)] if m]
    if probability == 0:
        return [f"{len(found)} loss rule(s) left on {dev}"] if found else []
    if len(found) != 1:
        return [f"{len(found)} loss rules on {dev}, expected one with probability "
                f"{probability:g}"]
    if abs(found[0] - probability) > 1e-9:
        return [f"loss rule on {dev} drops {found[0]:g}, set {probability:g}"]
    return []


def is_outage(rate_bps: float) -> bool:
    """Whether a trace bandwidth (bit/s) is an outage (below :data:`OUTAGE_BPS`)."""
    return rate_bps < OUTAGE_BPS


def outage_rule_commands(dev: str, action: str = "add",
                         netns: str | None = None) -> list[list[str]]:
    """The iptables line that drops everything received on ``dev`` (``add``, first rule of
    INPUT) or removes it (``delete``)."""
    head = {"add": ["-I", "INPUT", "1"], "delete": ["-D", "INPUT"]}.get(action)
    if head is None:
        raise ValueError(f"unknown iptables action {action!r}; choose add or delete")
    return [[*exec_in(netns), "iptables", "-w", *head, "-i", dev, "-m", "comment",
             "--comment", OUTAGE_COMMENT, "-j", "DROP"]]


def check_outage_readback(rules: str, dev: str, down: bool) -> list[str]:
    """Problems with ``dev``'s outage rule in ``iptables -S INPUT`` output: exactly one
    while ``down``, none otherwise."""
    found = sum(1 for line in rules.splitlines()
                if f"-i {dev} " in line and OUTAGE_COMMENT in line and " -j DROP" in line)
    if found != (1 if down else 0):
        state = "down (one outage rule)" if down else "up (no outage rule)"
        return [f"{found} outage rule(s) on {dev}, expected the link {state}"]
    return []


class LinkSwitch:
    """Takes one device's link down for an outage and back up, with read-back; used by
    :class:`decobench.netem.netns.NamespaceNetwork` and
    :class:`decobench.netem.player.TcShaper` alike. ``run(argv)`` runs and logs a command;
    ``read(argv)`` runs one and returns its output (not logged)."""

    def __init__(self, dev: str, netns: str | None, run: Callable[[list[str]], object],
                 read: Callable[[list[str]], str], name: str) -> None:
        self.dev, self.netns, self._run, self._read, self.name = dev, netns, run, read, name
        self.down = False

    def set(self, down: bool) -> None:
        if down == self.down:
            return
        for argv in outage_rule_commands(self.dev, "add" if down else "delete", self.netns):
            self._run(argv)
        self.down = down
        problems = check_outage_readback(self._read(readback_command(self.netns)), self.dev,
                                         down)
        if problems:
            raise ShapingMismatch(f"{self.name}: " + "; ".join(problems))


def change_link(setting: LinkSetting, *, shape: Callable[[LinkSetting], None],
                delayer: Delayer | None, switch: LinkSwitch, name: str) -> None:
    """One live change of one link (a trace row), the same for every shaper
    (:class:`decobench.netem.netns.NamespaceNetwork`, :class:`decobench.netem.player.TcShaper`):
    a usable bandwidth reshapes in place (``shape(setting)``, read back) and moves the NFQUEUE
    ``delayer`` (if any) to the row's latency, then brings the link up; a bandwidth below
    :data:`OUTAGE_BPS` only takes the link down (the shaping keeps its last rate). A delayer
    that has exited is an error naming the link: its queue drops every packet."""
    down = is_outage(setting.rate_bps)
    if not down:
        shape(setting)
        if delayer is not None:
            if not delayer.alive():
                raise DecobenchError(f"the NFQUEUE delayer of the {name} has exited: that "
                                     "link drops every packet")
            delayer.set_delay(setting.latency_s)
    switch.set(down)
