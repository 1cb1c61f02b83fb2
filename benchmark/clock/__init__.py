"""The time model: what a message costs on a link and when each iteration starts
(docs/design.md §3, §4). Bits on the wire (``wire``), the topology factors h and l
(``topology``), transport models (``transport_model``), the event recurrence and its clock
(``timing``, ``timemodel``, ``link_sharing``), network regimes given by ratios (``regime``)
and fair simulated-time budgets (``budget``). Pure arithmetic on numbers, no torch.

May import: the foundation (``decobench.errors``, ``decobench.atomicio``,
``decobench.registry``) and ``decobench.netem``.
"""
