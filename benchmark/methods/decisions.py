"""What a method decides from the network, told apart from what it learns (trajectory reuse).

On the simulated clock a run's model trajectory depends on the task, the seed, the method's
options and the decisions the method makes from what it measured of the network (its
(δ_t, τ_t), DGA's delay D); the network itself only sets the time axis. A method declares
those decisions through :attr:`MethodSpec.network_decisions
<decobench.methods.base.MethodSpec.network_decisions>`, a factory of a
:class:`DecisionPolicy` that makes the same decisions as the method from the same
:class:`~decobench.methods.base.Observation` stream, without gradients:

- :data:`NETWORK_INDEPENDENT`: the method never reads an observation (D-SGD, a static
  DD-EF-SGD, Accordion, DGA with a given D): one trajectory serves every network;
- a policy (DeCo-SGD, the static strategies' frozen first plan, DGA's automatic D): a sweep
  runs it on each condition's event clock (:func:`decobench.runs.trajectory.decision_digest`),
  and conditions whose decisions come out identical share one trajectory;
- no factory (``network_decisions=None``, the default for a method registered from outside):
  unknown, so every condition trains its own trajectory.

A re-timed run (:mod:`decobench.runs.trajectory`) runs the policy again on its own clock, checks
each decision against the recorded one, and logs the policy's fields (e.g. the plan's
bandwidth estimate) in place of the recorded run's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decobench.compression.compressors import WireSize
from decobench.methods.base import Observation
from decobench.methods.controllers import Controller


@dataclass(frozen=True)
class Decision:
    """One iteration's network-dependent decision: the message's kept fraction ``delta``,
    ``staleness`` τ, ``bits_per_worker`` and ``dense`` flag (what the event clock charges),
    and the fields the method logs about it (``log``, e.g. a fresh plan's estimates)."""

    delta: float
    staleness: int
    bits_per_worker: int
    dense: bool
    log: dict[str, Any] = field(default_factory=dict)

    def charge(self) -> tuple[float, int, int, bool]:
        """What must match between two runs for them to train the same trajectory."""
        return (self.delta, self.staleness, self.bits_per_worker, self.dense)


class DecisionPolicy(ABC):
    """A method's decisions from the observations alone (see the module docstring)."""

    independent = False
    """True when no decision depends on the network (then :meth:`decide` is never called)."""

    @abstractmethod
    def observe(self, observation: Observation) -> None:
        """A transfer has arrived (the method's own ``observe`` sees the same one)."""

    @abstractmethod
    def decide(self, iteration: int) -> Decision:
        """The decision the method makes when it sends at ``iteration``."""


class _NetworkIndependent(DecisionPolicy):
    independent = True

    def observe(self, observation: Observation) -> None:
        return None

    def decide(self, iteration: int) -> Decision:
        raise TypeError("a network-independent method has no network decisions")


NETWORK_INDEPENDENT: DecisionPolicy = _NetworkIndependent()
"""The policy of a method that never reads an observation."""


def network_independent(context: Any, options: Any) -> DecisionPolicy:
    """:attr:`MethodSpec.network_decisions` of a method that never reads the network."""
    return NETWORK_INDEPENDENT


class ControllerDecisions(DecisionPolicy):
    """DD-EF-SGD's decisions (:class:`~decobench.methods.ddefsgd.DDEFSGD.send`): the
    controller's (δ_t, τ_t) and its log, with the bits ``size(δ)`` the compressor sends."""

    def __init__(self, controller: Controller, size: Callable[[float], WireSize]) -> None:
        self.controller = controller
        self.size = size

    def observe(self, observation: Observation) -> None:
        self.controller.observe(observation)

    def decide(self, iteration: int) -> Decision:
        schedule = self.controller.schedule(iteration)
        wire = self.size(schedule.delta)
        return Decision(wire.delta, schedule.staleness, wire.bits_per_worker, wire.dense,
                        self.controller.log())


__all__ = ["NETWORK_INDEPENDENT", "ControllerDecisions", "Decision", "DecisionPolicy",
           "WireSize", "network_independent"]
