"""The emulated backend: n real worker processes over links shaped from the trace.

- :mod:`decobench.compression.codec` (in the compression floor, beside the compressors) — a
  message's bytes, exactly ⌈W/8⌉ of payload;
- :mod:`decobench.emulated.delivery` — the latency the communication layer adds;
- :mod:`decobench.emulated.comm` — background collectives overlapping computation;
- :mod:`decobench.emulated.transport` — the transport the one training loop
  (:mod:`decobench.training.loop`) runs over on a rank: collectives, header agreement, measured clock;
- :mod:`decobench.emulated.worker` — one rank: process group, run directory, the loop
  (torchrun-compatible);
- :mod:`decobench.emulated.launcher` — ``decobench run --backend emulated``: namespaces,
  shaping, probe, trace player, worker processes, fault handling and teardown;
- :mod:`decobench.emulated.fidelity` — ``decobench fidelity``: both backends, one table.

Every method's worker half (:meth:`Method.send`) and aggregation half
(:meth:`Method.receive`) run here on separate ranks with the very same objects as on the
simulated backend, unless its :class:`~decobench.methods.MethodSpec` declares that it cannot
(``emulation``: the reason, shown in the error).

May import: every floor below it (foundation, ``netem``, ``clock``, ``planning``,
``compression``, ``methods``, ``tasks``, ``training``, ``runs``). ``entry`` and
``__main__`` (one rank's command line) are front ends.
"""
