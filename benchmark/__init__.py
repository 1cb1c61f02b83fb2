"""decobench: distributed training over wide-area networks, on a simulated clock.

The package follows the DeCo-SGD paper's vocabulary (see ``docs/design.md``):
``compression_ratio`` δ, ``staleness`` τ, ``error_feedback`` memory e, bandwidth a(t),
latency b(t), per-iteration compute time T.
"""

__version__ = "0.1.0"
