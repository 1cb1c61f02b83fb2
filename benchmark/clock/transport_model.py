"""Transport models: how a real transport's collectives depart from the ideal link of the
time model (docs/design.md §4.2), as a named, swappable piece of the simulated clock.

The time model charges a message of ``W`` bits ``h·W / a`` of link time and delivers it
``l·b`` later. A real transport does not quite: measured on this project's emulated links
(gloo over TCP, docs/emulation.md "Transport models"), a collective waits for the receiver's
ready notice before it sends (gloo's rendezvous: about ``2b`` per ring step, not ``b``), the
shaper lets its token bucket's bytes through at line rate, and both directions of one TCP
connection carrying data can cost goodput. :class:`CollectiveCost` describes one kind of
collective by three numbers, and :class:`EventClock <decobench.clock.timemodel.EventClock>`
charges::

    link time  = max(0, h·W − B) / (g · a)        (B: burst bits, g: goodput fraction)
    delivery   = m · l · b(tx_end)                 (m: latency multiplier)

:data:`IDEAL` (``m = g = 1``, ``B = 0``) is docs/design.md §4.2 exactly and the default of every
simulated run; a fitted model comes from :mod:`decobench.emulated.calibrate` (timings of
real collectives of several sizes on the emulated links, written as
``RUN_DIR/transport_model.json``) and is given to a simulated run with
``--transport-model FILE``. The estimators then read what the transport delivers: DeCo's
``â = hW / (tx_end − tx_start)`` and ``b̂ = (arrive − tx_end) / l`` on the simulated clock
are what the emulated ranks measure (:mod:`decobench.emulated.comm`).

How messages in flight share the link is the model's second part (:data:`LINK_SHARING`):
``fifo``, the time model's single queue, is the default and the paper's; ``shared``
(:mod:`decobench.clock.link_sharing`) runs each collective as its ring steps on a lane of its own,
sending at a share of the link while others send, which is what the emulated transport's
lanes do (calibration writes ``shared`` with the run's lanes when the network holds the
latency). The two agree while messages do not overlap (τ = 0).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from decobench.errors import DecobenchError

TRANSPORT_MODEL_FILE = "transport_model.json"
"""Where a calibrated emulated run writes its fitted model (in its run directory)."""


@dataclass(frozen=True)
class CollectiveCost:
    """The cost of one kind of collective beyond the ideal link (module docstring).

    ``latency_multiplier`` m: the delivery delay is ``m·l·b``; ``goodput`` g: the fraction
    of the link's rate the collective's bits get (under ``shared`` link sharing, the most a
    collective gets while the link's rate is shared among those sending:
    :mod:`decobench.clock.link_sharing`); ``burst_bits`` B: bits (of ``h·W``) that pass before the
    rate applies."""

    latency_multiplier: float = 1.0
    goodput: float = 1.0
    burst_bits: float = 0.0

    def __post_init__(self) -> None:
        for name, value, lowest in (("latency_multiplier", self.latency_multiplier, 0.0),
                                    ("burst_bits", self.burst_bits, 0.0)):
            if not (math.isfinite(value) and value >= lowest):
                raise DecobenchError(f"transport model: {name} must be finite and >= "
                                     f"{lowest:g}, got {value!r}")
        if not (math.isfinite(self.goodput) and 0.0 < self.goodput <= 2.0):
            raise DecobenchError(f"transport model: goodput must be in (0, 2], got "
                                 f"{self.goodput!r}")

    def after_burst(self, link_bits: float) -> float:
        """Bits of ``link_bits = h·W`` that wait for the link's rate: ``max(0, hW − B)``."""
        return max(0.0, link_bits - self.burst_bits)

    def rate_bits(self, link_bits: float) -> float:
        """Bits to charge at the link's rate for ``link_bits = h·W``: ``max(0, hW − B) / g``."""
        return self.after_burst(link_bits) / self.goodput


LINK_SHARING = ("fifo", "shared")
"""How messages in flight use the link: ``fifo``, the time model's one queue (docs/design.md
§4.2: a message starts when the previous one's last bit has left); ``shared``, collectives on
lanes of their own that send at once, each at a share of the link
(:mod:`decobench.clock.link_sharing`)."""


@dataclass(frozen=True)
class TransportModel:
    """A named pair of :class:`CollectiveCost`: sparse messages (all-gather) and dense ones
    (all-reduce); ``link_sharing`` (:data:`LINK_SHARING`) and, for ``shared``, ``lanes``
    (collectives in flight at most; None: no bound); ``source`` says where the numbers come
    from."""

    name: str
    all_gather: CollectiveCost
    all_reduce: CollectiveCost
    source: str = ""
    link_sharing: str = "fifo"
    lanes: int | None = None

    def __post_init__(self) -> None:
        if self.link_sharing not in LINK_SHARING:
            raise DecobenchError(f"transport model: link_sharing must be one of "
                                 f"{', '.join(LINK_SHARING)}, got {self.link_sharing!r}")
        if self.lanes is not None and (isinstance(self.lanes, bool)
                                       or not isinstance(self.lanes, int) or self.lanes < 1):
            raise DecobenchError(f"transport model: lanes must be an integer >= 1 or null "
                                 f"(no bound), got {self.lanes!r}")

    def cost(self, dense: bool) -> CollectiveCost:
        return self.all_reduce if dense else self.all_gather

    @property
    def ideal(self) -> bool:
        return (self.all_gather == CollectiveCost() and self.all_reduce == CollectiveCost()
                and self.link_sharing == "fifo")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source,
                "all_gather": asdict(self.all_gather), "all_reduce": asdict(self.all_reduce),
                "link_sharing": self.link_sharing, "lanes": self.lanes}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "transport model") -> TransportModel:
        """The inverse of :meth:`to_dict`; a file without ``link_sharing`` (written before
        it existed) is ``fifo``."""
        try:
            return cls(name=str(data["name"]), source=str(data.get("source", "")),
                       all_gather=CollectiveCost(**data["all_gather"]),
                       all_reduce=CollectiveCost(**data["all_reduce"]),
                       link_sharing=str(data.get("link_sharing", "fifo")),
                       lanes=data.get("lanes"))
        except (KeyError, TypeError) as exc:
            raise DecobenchError(f"{where}: not a transport model (needs name, all_gather and "
                                 f"all_reduce with latency_multiplier, goodput, burst_bits): "
                                 f"{exc}") from None

    def with_link_sharing(self, link_sharing: str, lanes: int | None = None) -> TransportModel:
        """The same costs with another :data:`LINK_SHARING` (and lanes)."""
        return dataclasses.replace(self, link_sharing=link_sharing, lanes=lanes)


IDEAL = TransportModel("ideal", CollectiveCost(), CollectiveCost(),
                       source="docs/design.md §4: h·W / a of link time, l·b of latency")
"""The time model's own link: the default of every simulated run."""


def load_transport_model(path: str | Path) -> TransportModel:
    """``ideal``, or a model file (``transport_model.json`` of a calibrated emulated run, or
    a run directory holding one)."""
    if str(path) == "ideal":
        return IDEAL
    file = Path(path)
    if file.is_dir():
        file = file / TRANSPORT_MODEL_FILE
    if not file.is_file():
        raise DecobenchError(f"--transport-model {path}: no such file (give 'ideal', a "
                             f"{TRANSPORT_MODEL_FILE} or the emulated run directory holding "
                             "one: decobench run --backend emulated --calibrate-transport)")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise DecobenchError(f"--transport-model {path}: not JSON ({exc})") from None
    return TransportModel.from_dict(data, where=f"--transport-model {path}")


__all__ = ["IDEAL", "LINK_SHARING", "TRANSPORT_MODEL_FILE", "CollectiveCost", "TransportModel",
           "load_transport_model"]
