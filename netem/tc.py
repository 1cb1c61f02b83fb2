"""Pure builders of ``tc`` command lines that shape one link's egress.

Nothing here runs a command: :func:`shaping_commands` returns argv lists that
:mod:`decobench.netem.netns` (namespaces), :mod:`decobench.netem.player` (a trace played live) and the docs run
or print. One link is one network device's egress queue.

Structure (both mechanisms). An HTB tree limits the device's egress to the link rate ``R``;
small packets (IP length < 128 bytes: pure TCP ACKs, latency pings) get their own class with
priority, so the ACKs of an incoming transfer never wait behind a queue of outgoing data::

    1:   htb root (unclassified traffic -> 1:20)
    1:1  class, rate R ceil R                        (the link)
    1:10 class, rate 5% of R, ceil R, prio 0          small packets (u32 filter, IP len < 128)
    1:20 class, rate 95% of R, ceil R, prio 1         everything else
    10:, 20: leaf queues of 1:10 and 1:20

In a ring all-reduce every link carries data one way and the ACKs of the neighbour's
transfer the other way; with one FIFO those ACKs queue behind the data and the measured
goodput fell 5-20% below the request (see ``docs/emulation.md``). The kernels this project
was built on lack ``fq``, ``fq_codel``, ``sfq`` and ``prio``; HTB and u32 are always there.

Two latency mechanisms (``docs/emulation.md``, "Latency mechanisms"):

``"netem"``
    The leaves are ``netem`` qdiscs that delay every packet by the one-way latency (as in
    Mininet: HTB for the rate, netem leaves for the delay); packets past their delay wait
    there for HTB's tokens.

``"nfqueue"``
    The kernel limits the rate only (leaves ``pfifo``/``bfifo``), and on each receiving
    device an iptables NFQUEUE rule hands every packet to a user-space delayer that holds it
    ``b(t)`` (:mod:`decobench.netem.nfqueue`): latency at the packet level, data and ACKs
    alike, on kernels without ``sch_netem``.

``"comm-layer"``
    The kernel limits the rate only (leaves ``pfifo``/``bfifo``); the training process's
    communication layer delays each message by the latency itself (it delivers a message no
    earlier than its transmission end plus ``b(t)``). The last fallback: it needs neither
    netem nor iptables, but TCP never sees the round trip.

Goodput calibration. A trace's bandwidth is application goodput: the time model charges
``W / a`` seconds for ``W`` payload bits. HTB counts layer-2 frame bytes, so the rate given
to tc is ``R = a * framing_factor``. With MTU 1500 and TCP timestamps a full frame carries
1448 payload bytes in 1514 bytes (14 Ethernet + 20 IP + 32 TCP header bytes), hence
:data:`TCP_FRAMING_FACTOR` ``= 1514 / 1448``.

Queue rule (bandwidth-delay product). The byte limit of the bulk queue is::

    limit_bytes = max(QUEUE_FLOOR_BYTES, R/8 * (2 * kernel_latency + QUEUE_HEADROOM_S))

where ``kernel_latency`` is the latency the kernel adds (the setting's latency under
``netem``, 0 under ``comm-layer``, whose kernel round trip is ~0). One round trip of data
(one BDP) lets a single TCP flow keep the link busy after a loss; the headroom absorbs
scheduling jitter. A netem leaf also holds the packets still in their delay and counts
packets, so its limit is ``ceil((limit_bytes + R/8 * latency) / FRAME_BYTES)`` packets; the
small-packet leaf gets the same packet count, at least :data:`SMALL_QUEUE_FLOOR_PACKETS`.

Burst. ``burst = cburst = max(2 * FRAME_BYTES, ceil(R/8 * BURST_S))`` bytes: at least two
full frames, and at least :data:`BURST_S` (1 ms) of the rate, so HTB (woken by a
high-resolution timer) meets the rate. Offload packets are capped at
:func:`gso_segments` frames, about 1 ms of the rate (1 to 16 frames): HTB charges a packet
whole, so a packet far longer than the bucket lets a burst through at line rate. Both keep
what passes at line rate small beside a message: with a 4 ms bucket and 16-frame packets a
29 kB all-gather at 20 Mbit/s went through in 2.4 ms instead of 11.6 ms, and DeCo's first
plan read 97 Mbit/s (measured, nfqueue).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from decobench.errors import DecobenchError

Mechanism = Literal["netem", "nfqueue", "comm-layer"]
"""How the one-way latency is added: by a kernel qdisc (``netem``), by a user-space delayer
on the kernel's receive path (``nfqueue``), or by the training process (``comm-layer``)."""

MECHANISMS: tuple[str, ...] = ("netem", "nfqueue", "comm-layer")

PACKET_LEVEL_MECHANISMS: tuple[str, ...] = ("netem", "nfqueue")
"""Mechanisms under which every packet (data and ACKs) is delayed on the path, so a round
trip between two workers takes 2 b (the probe checks it)."""

Action = Literal["add", "change"]
"""``add`` creates the qdiscs, classes and filter; ``change`` updates them in place (queued
packets are kept)."""

ACTIONS: tuple[str, ...] = ("add", "change")

MTU_BYTES: int = 1500
"""IP MTU of the emulated links."""

FRAME_BYTES: int = MTU_BYTES + 14
"""A full Ethernet frame as tc counts it: MTU plus the 14-byte Ethernet header."""

TCP_PAYLOAD_BYTES: int = MTU_BYTES - 20 - 32
"""TCP payload of a full frame: MTU minus IPv4 (20) and TCP with timestamps (32) headers."""

TCP_FRAMING_FACTOR: float = FRAME_BYTES / TCP_PAYLOAD_BYTES
"""Frame bytes per goodput byte for bulk TCP at MTU 1500 with timestamps: 1514/1448."""

BURST_S: float = 0.001
"""Seconds of the rate the token bucket holds (at least two frames)."""

QUEUE_FLOOR_BYTES: int = 64 * FRAME_BYTES
"""Smallest queue limit in bytes (64 full frames), whatever the rate and latency."""

QUEUE_HEADROOM_S: float = 0.05
"""Queue room beyond one round trip of data, in seconds at the link's rate."""

GSO_MAX_SEGS: int = 16
"""Largest segmentation-offload packet, in frames (16 frames, about 24 KB), set on each shaped
device (:func:`gso_segments` takes fewer at low rates). HTB charges a packet at once however
large: with the default 64 KB offload packets the measured goodput at 2-5 Mbit/s was 3-8%
low and noisy; with 16 it is within 2% from 2 Mbit/s to 1 Gbit/s, and 1 Gbit/s still needs
little CPU (1 frame per packet could not reach 300 Mbit/s on two cores). TCP reads the value
when a connection starts."""

SMALL_QUEUE_FLOOR_PACKETS: int = 1000
"""Smallest packet limit of the small-packet leaf."""

SMALL_PACKET_BYTES: int = 128
"""IP packets shorter than this (pure ACKs, pings) go to the priority class 1:10; a power
of two, so the u32 filter is one mask: ``IP total length & ~(SMALL_PACKET_BYTES-1) == 0``."""

SMALL_CLASS_SHARE: float = 0.05
"""Share of the rate guaranteed to the small-packet class; either class may borrow up to R."""

HTB_QUANTUM_BYTES: int = FRAME_BYTES
"""HTB's round-robin quantum (only used between classes of equal priority)."""

ROOT: str = "1:"
LINK_CLASS: str = "1:1"
SMALL_CLASS: str = "1:10"
BULK_CLASS: str = "1:20"
SMALL_LEAF: str = "10:"
BULK_LEAF: str = "20:"
DEFAULT_MINOR: str = "20"
"""HTB's ``default`` (hex minor, as tc parses it): unclassified traffic goes to 1:20."""


class LinkSettingError(DecobenchError, ValueError):
    """A rate or latency that no link can have (the message names the field and value)."""


@dataclass(frozen=True)
class LinkSetting:
    """What one link should deliver: goodput ``rate_bps`` (bit/s, > 0) and one-way latency
    ``latency_s`` (seconds, >= 0); the trace's ``a(t)`` and ``b(t)`` at one time."""

    rate_bps: float
    latency_s: float

    def __post_init__(self) -> None:
        rate = float(self.rate_bps)
        latency = float(self.latency_s)
        if not (math.isfinite(rate) and rate > 0.0):
            raise LinkSettingError(
                f"rate_bps must be a finite number > 0 (bit/s), got {self.rate_bps!r}"
            )
        if not (math.isfinite(latency) and latency >= 0.0):
            raise LinkSettingError(
                f"latency_s must be a finite number >= 0 (seconds), got {self.latency_s!r}"
            )
        object.__setattr__(self, "rate_bps", rate)
        object.__setattr__(self, "latency_s", latency)

    def describe(self) -> str:
        """``"20 Mbit/s, 100 ms"``."""
        return f"{self.rate_bps / 1e6:.6g} Mbit/s, {self.latency_s * 1e3:.6g} ms"


def check_mechanism(mechanism: str) -> Mechanism:
    """``mechanism`` if it is one of :data:`MECHANISMS`, else ValueError naming the choices."""
    if mechanism not in MECHANISMS:
        raise ValueError(
            f"unknown latency mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}"
        )
    return mechanism  # type: ignore[return-value]


def tc_rate_bps(setting: LinkSetting, framing_factor: float = TCP_FRAMING_FACTOR) -> int:
    """The frame rate given to tc, bit/s: goodput times ``framing_factor``, rounded."""
    if not (math.isfinite(framing_factor) and framing_factor >= 1.0):
        raise ValueError(f"framing_factor must be a finite number >= 1, got {framing_factor!r}")
    return max(1, round(setting.rate_bps * framing_factor))


def kernel_latency_s(setting: LinkSetting, mechanism: str) -> float:
    """The one-way latency the qdisc adds: the setting's under netem, else 0 (nfqueue delays
    on the receive path, outside the qdisc; comm-layer in the training process)."""
    return setting.latency_s if check_mechanism(mechanism) == "netem" else 0.0


def path_latency_s(setting: LinkSetting, mechanism: str) -> float:
    """The one-way latency a packet sees on the path: the setting's under netem and
    nfqueue, 0 under comm-layer."""
    return setting.latency_s if check_mechanism(mechanism) in PACKET_LEVEL_MECHANISMS else 0.0


def burst_bytes(rate_bps: float) -> int:
    """Token bucket size for a tc rate (bit/s): two frames or :data:`BURST_S` of the rate,
    the larger."""
    return max(2 * FRAME_BYTES, math.ceil(rate_bps / 8.0 * BURST_S))


def burst_payload_bits(goodput_bps: float,
                       framing_factor: float = TCP_FRAMING_FACTOR) -> float:
    """The payload bits a link shaped for goodput ``goodput_bps`` passes at line rate before
    its rate applies: the token bucket (:func:`burst_bytes` of the tc rate) in TCP payload.
    A transfer's measured duration leaves them out, so a bandwidth estimate from a short
    transfer has to (DeCo's estimators: ``Observation.burst_bits``)."""
    rate = max(1, round(goodput_bps * framing_factor))
    return 8.0 * burst_bytes(rate) / framing_factor


def gso_segments(rate_bps: float) -> int:
    """Frames per offload packet for a tc rate (bit/s): about :data:`BURST_S` of the rate,
    1 to :data:`GSO_MAX_SEGS`."""
    return max(1, min(GSO_MAX_SEGS, math.floor(rate_bps / 8.0 * BURST_S / FRAME_BYTES)))


def queue_limit_bytes(rate_bps: float, latency_s: float) -> int:
    """Queue limit for a tc rate (bit/s) and kernel latency (s); the BDP rule above."""
    bdp = rate_bps / 8.0 * (2.0 * latency_s + QUEUE_HEADROOM_S)
    return max(QUEUE_FLOOR_BYTES, math.ceil(bdp))


def exec_in(netns: str | None) -> list[str]:
    """The prefix that runs a command in ``netns``: ``ip netns exec NS`` (none if None).

    ``ip netns exec`` rather than ``tc -n`` keeps the tc part of each logged line exactly
    what one would type inside the namespace."""
    return ["ip", "netns", "exec", netns] if netns else []


def netem_limit_packets(rate_bps: float, latency_s: float) -> int:
    """Packet limit of a netem leaf: the byte queue plus the packets in their delay."""
    in_delay = rate_bps / 8.0 * latency_s
    return math.ceil((queue_limit_bytes(rate_bps, latency_s) + in_delay) / FRAME_BYTES)


def small_limit_packets(rate_bps: float, latency_s: float) -> int:
    """Packet limit of the small-packet leaf: as a netem leaf, at least the floor."""
    return max(SMALL_QUEUE_FLOOR_PACKETS, netem_limit_packets(rate_bps, latency_s))


def shaping_commands(
    dev: str,
    setting: LinkSetting,
    mechanism: str,
    action: str,
    framing_factor: float = TCP_FRAMING_FACTOR,
    netns: str | None = None,
) -> list[list[str]]:
    """The tc argv lists that give ``dev``'s egress ``setting`` under ``mechanism``.

    ``action`` is ``add`` (first set-up: root, classes, leaves, filter; the device must
    have no root qdisc of its own, see :func:`clear_commands`) or ``change`` (update the
    classes and leaves in place; queued packets are kept; used by the trace player).
    ``netns`` runs the commands in that namespace (``ip netns exec NS tc ...``). The commands run in the
    order returned. See the module docstring for the rate, burst and limit rules.
    """
    check_mechanism(mechanism)
    if action not in ACTIONS:
        raise ValueError(f"unknown tc action {action!r}; choose one of {', '.join(ACTIONS)}")
    if not dev:
        raise ValueError("dev must name a network device, got an empty string")
    tc = [*exec_in(netns), "tc"]
    rate = tc_rate_bps(setting, framing_factor)
    small = max(1, round(rate * SMALL_CLASS_SHARE))
    bulk = max(1, rate - small)
    latency = kernel_latency_s(setting, mechanism)
    burst = str(burst_bytes(rate))

    def htb_class(parent: str, classid: str, guaranteed: int, prio: str | None) -> list[str]:
        return [
            *tc, "class", action, "dev", dev, "parent", parent, "classid", classid, "htb",
            "rate", f"{guaranteed}bit", "ceil", f"{rate}bit", "burst", burst, "cburst", burst,
            *(["prio", prio] if prio is not None else []),
            "quantum", str(HTB_QUANTUM_BYTES),
        ]  # fmt: skip

    def leaf(parent: str, handle: str, queue: list[str]) -> list[str]:
        return [*tc, "qdisc", action, "dev", dev, "parent", parent, "handle", handle, *queue]

    if mechanism == "netem":
        delay = ["delay", f"{round(latency * 1e6)}us"]
        small_queue = ["netem", *delay, "limit", str(small_limit_packets(rate, latency))]
        bulk_queue = ["netem", *delay, "limit", str(netem_limit_packets(rate, latency))]
    else:
        # nfqueue delays on the receiver, comm-layer above the kernel; either way size the
        # queue from the emulated path's bandwidth-delay product (under comm-layer a queue
        # of only the headroom dropped GSO bursts of back-to-back collectives and cost ~30%
        # goodput)
        small_queue = ["pfifo", "limit", str(small_limit_packets(rate, setting.latency_s))]
        bulk_queue = ["bfifo", "limit", str(queue_limit_bytes(rate, setting.latency_s))]
    commands = [
        htb_class(ROOT, LINK_CLASS, rate, None),
        htb_class(LINK_CLASS, SMALL_CLASS, small, "0"),
        htb_class(LINK_CLASS, BULK_CLASS, bulk, "1"),
        leaf(SMALL_CLASS, SMALL_LEAF, small_queue),
        leaf(BULK_CLASS, BULK_LEAF, bulk_queue),
    ]
    if action == "change":
        return commands
    root = [*tc, "qdisc", action, "dev", dev, "root", "handle", ROOT, "htb",
            "default", DEFAULT_MINOR]  # fmt: skip
    small_filter = [
        *tc, "filter", action, "dev", dev, "parent", ROOT, "protocol", "ip", "prio", "1",
        "u32", "match", "u16", "0x0000", f"{0xFFFF & ~(SMALL_PACKET_BYTES - 1):#06x}", "at", "2",
        "flowid", SMALL_CLASS,
    ]  # fmt: skip
    return [root, *commands, small_filter]


def device_commands(dev: str, netns: str | None = None,
                    rate_bps: float | None = None) -> list[list[str]]:
    """Device settings that shaping relies on: cap offload packets at
    :func:`gso_segments` of the (first) rate, :data:`GSO_MAX_SEGS` without one.

    Run them before the connections that will be shaped are opened."""
    segments = GSO_MAX_SEGS if rate_bps is None else gso_segments(rate_bps)
    return [[*exec_in(netns), "ip", "link", "set", "dev", dev, "gso_max_segs", str(segments)]]


def clear_commands(dev: str, netns: str | None = None) -> list[list[str]]:
    """Remove ``dev``'s root qdisc (and with it all shaping); fails if there is none."""
    return [[*exec_in(netns), "tc", "qdisc", "del", "dev", dev, "root"]]


def format_command(argv: Sequence[str]) -> str:
    """One shell-quoted line for logs and ``tc_commands.txt``."""
    return shlex.join(list(argv))


# ------------------------------------------------------------------------------ read-back
RATE_UNITS: dict[str, float] = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
READBACK_RATE_TOLERANCE: float = 0.005
"""Relative slack when comparing a rate read back from tc with the one set: tc prints rates
with at least four digits (``20911Kbit`` for 20,911,602 bit/s), so at most 0.1% is lost."""

READBACK_RATE_SLACK_BPS: float = 16.0
"""Absolute slack on top: the kernel keeps HTB rates in whole bytes per second, so a rate
reads back up to 8 bit/s lower (1,046 bit/s set reads ``1040bit``)."""


def readback_commands(dev: str, netns: str | None = None) -> list[list[str]]:
    """``tc class show`` and ``tc qdisc show`` of ``dev``: what :func:`check_readback` reads."""
    tc = [*exec_in(netns), "tc"]
    return [[*tc, "class", "show", "dev", dev], [*tc, "qdisc", "show", "dev", dev]]


def _number(text: str, units: dict[str, float], suffix: str) -> float:
    match = re.fullmatch(rf"([0-9.]+)([A-Za-z]*){suffix}", text)
    if not match or match.group(2) not in units:
        raise ValueError(f"cannot read {text!r}")
    return float(match.group(1)) * units[match.group(2)]


def parse_classes(text: str) -> dict[str, dict[str, float]]:
    """``tc class show`` output -> ``{classid: {"rate": bit/s, "ceil": bit/s}}`` (HTB)."""
    classes: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "class" or words[1] != "htb":
            continue
        values: dict[str, float] = {}
        for key in ("rate", "ceil"):
            if key in words[2:-1]:
                values[key] = _number(words[words.index(key, 2) + 1], RATE_UNITS, "bit")
        classes[words[2]] = values
    return classes


def parse_qdiscs(text: str) -> dict[str, dict[str, object]]:
    """``tc qdisc show`` output -> ``{handle: {"kind", "parent", "delay_s"?}}``."""
    qdiscs: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "qdisc":
            continue
        entry: dict[str, object] = {"kind": words[1]}
        if "root" in words:
            entry["parent"] = "root"
        elif "parent" in words:
            entry["parent"] = words[words.index("parent") + 1]
        if "delay" in words[:-1]:
            entry["delay_s"] = _number(words[words.index("delay") + 1], TIME_UNITS, "")
        if words[1] == "tbf" and "rate" in words[:-1]:
            entry["rate_bps"] = _number(words[words.index("rate") + 1], RATE_UNITS, "bit")
        qdiscs[words[2]] = entry
    return qdiscs


def _rate_off(got: float, want: float) -> bool:
    return abs(got - want) > READBACK_RATE_TOLERANCE * want + READBACK_RATE_SLACK_BPS


def _delay_off(got: float, want: float) -> bool:
    return abs(got - want) > max(1e-4, 0.01 * want)


def check_docker_tc_readback(qdisc_text: str, setting: LinkSetting, mechanism: str,
                             framing_factor: float = TCP_FRAMING_FACTOR) -> list[str]:
    """What is wrong with a container's shaping as docker-tc's ``GET /<container>`` reports
    it (``tc qdisc show`` of the container's host-side interfaces) against ``setting``: what
    upstream's POST sets is a netem root (``delay``, under ``netem``) with a tbf child
    (``rate``), or a tbf root alone (``comm-layer``: no delay sent). Upstream answers a POST
    with success even when ``tc`` failed (no ``sch_netem``), so this read-back is what tells."""
    try:
        qdiscs = parse_qdiscs(qdisc_text)
    except ValueError as exc:
        return [f"docker-tc's answer could not be read ({exc})"]
    kinds = ", ".join(f"{q['kind']} {h}" for h, q in qdiscs.items()) or "none"
    problems: list[str] = []
    if mechanism == "netem":
        netem = [q for q in qdiscs.values() if q["kind"] == "netem"]
        delay = netem[0].get("delay_s") if netem else None
        if not isinstance(delay, float):
            problems.append(f"no netem qdisc with a delay (qdiscs: {kinds}): the link is not "
                            "delayed (docker-tc answers success when the kernel has no "
                            "sch_netem)")
        elif _delay_off(delay, setting.latency_s):
            problems.append(f"netem delays {delay * 1e3:.3f} ms, set "
                            f"{setting.latency_s * 1e3:.3f} ms")
    tbf = [q for q in qdiscs.values() if q["kind"] == "tbf"]
    rate = tbf[0].get("rate_bps") if tbf else None
    want = tc_rate_bps(setting, framing_factor)
    if not isinstance(rate, float):
        problems.append(f"no tbf qdisc with a rate (qdiscs: {kinds}): the link is not shaped")
    elif _rate_off(rate, want):
        problems.append(f"tbf rate {rate / 1e6:.4g} Mbit/s, set {want / 1e6:.4g} Mbit/s")
    return problems


def check_readback(
    class_text: str,
    qdisc_text: str,
    setting: LinkSetting,
    mechanism: str,
    framing_factor: float = TCP_FRAMING_FACTOR,
) -> list[str]:
    """What is wrong with a device's shaping as tc reports it, against ``setting`` under
    ``mechanism`` (one phrase per problem; empty when it is what :func:`shaping_commands`
    sets): the HTB root, the link class's rate and ceil, and the two leaves (netem with the
    latency under ``netem``; FIFOs otherwise)."""
    check_mechanism(mechanism)
    problems: list[str] = []
    try:
        classes, qdiscs = parse_classes(class_text), parse_qdiscs(qdisc_text)
    except ValueError as exc:
        return [f"tc's answer could not be read ({exc})"]
    root = qdiscs.get(ROOT)
    if root is None or root.get("kind") != "htb" or root.get("parent") != "root":
        kinds = ", ".join(f"{q['kind']} {h}" for h, q in qdiscs.items()) or "none"
        return [f"no HTB root qdisc {ROOT} (qdiscs: {kinds}): the link is not shaped"]
    want = tc_rate_bps(setting, framing_factor)
    link = classes.get(LINK_CLASS, {})
    for key in ("rate", "ceil"):
        got = link.get(key)
        if got is None or _rate_off(got, want):
            shown = "missing" if got is None else f"{got / 1e6:.4g} Mbit/s"
            problems.append(f"class {LINK_CLASS} {key} {shown}, set {want / 1e6:.4g} Mbit/s")
    for leaf, parent in ((SMALL_LEAF, SMALL_CLASS), (BULK_LEAF, BULK_CLASS)):
        entry = qdiscs.get(leaf)
        if entry is None or entry.get("parent") != parent:
            problems.append(f"leaf qdisc {leaf} under {parent} is missing")
            continue
        if mechanism == "netem":
            delay = entry.get("delay_s")
            if entry["kind"] != "netem" or not isinstance(delay, float):
                problems.append(f"leaf {leaf} is {entry['kind']}, not netem with a delay")
            elif _delay_off(delay, setting.latency_s):
                problems.append(f"leaf {leaf} delays {delay * 1e3:.3f} ms, set "
                                f"{setting.latency_s * 1e3:.3f} ms")
        elif entry["kind"] not in ("pfifo", "bfifo"):
            problems.append(f"leaf {leaf} is {entry['kind']}, expected a FIFO")
    return problems
