"""decobench: distributed training over wide-area networks, on a simulated clock.

The package follows the DeCo-SGD paper's vocabulary (see ``docs/design.md``):
``compression_ratio`` δ, ``staleness`` τ, ``error_feedback`` memory e, bandwidth a(t),
latency b(t), per-iteration compute time T.

``benchmark/`` is built in floors, each a subpackage that imports only the floors below it
(docs/architecture.md "Floors"; ``tests/test_layers.py`` checks every import): the
foundation here (``errors``, ``atomicio``, ``registry``), then ``clock``, ``planning``,
``compression``, ``methods``, ``tasks``, ``training``, ``runs``, ``emulated``, ``sweeps``,
and the front ends ``cli`` and ``library`` on top.
"""

__version__ = "0.2.0"
