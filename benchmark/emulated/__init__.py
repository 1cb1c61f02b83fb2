"""The emulated backend: n real worker processes over links shaped from the trace.

- :mod:`decobench.emulated.codec` — a message's bytes, exactly ⌈W/8⌉ of payload;
- :mod:`decobench.emulated.delivery` — the latency the communication layer adds;
- :mod:`decobench.emulated.comm` — background collectives overlapping computation;
- :mod:`decobench.emulated.worker` — one rank's training loop (torchrun-compatible);
- :mod:`decobench.emulated.launcher` — ``decobench run --backend emulated``: namespaces,
  shaping, probe, trace player, worker processes, fault handling and teardown;
- :mod:`decobench.emulated.fidelity` — ``decobench fidelity``: both backends, one table.

The methods that run here are the DD-EF-SGD family (D-SGD, DD-EF-SGD, DeCo-SGD and
the paper's static strategy cocktail-sgd-topk): their
step splits into a worker half and an aggregation half that this backend runs on separate
ranks with the very same objects (:class:`decobench.methods.ddefsgd.DDEFSGD`).
"""

EMULATED_METHODS: tuple[str, ...] = ("d-sgd", "dd-ef-sgd", "deco-sgd", "cocktail-sgd-topk")
"""Methods with an emulated implementation."""
