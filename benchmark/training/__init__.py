"""One training loop and what it needs: flat parameters and per-worker gradients
(``flat``, ``gradients``, ``grouped_gradients``), data shards (``sharding``), devices and
memory (``devices``, ``allocator``), evaluation and targets (``evaluation``), the progress
bar (``progress``), the loop itself (``loop``) and its simulated transport on the event clock
(``simulated``) (docs/design.md §2, §4.2, §6).

May import: every floor below it: the foundation, ``decobench.netem``, ``clock``,
``planning``, ``compression``, ``methods`` and ``tasks``.
"""
