"""Baseline methods of the paper's comparison, registered with the method registry.

Each baseline reuses the shared machinery of :mod:`benchmark` (compressors, error
feedback, delay queue, shared optimizer); see ``../shared/spec/baselines.md``.
"""

from baselines.dsgd import DSGD_SPEC

BASELINE_SPECS = (DSGD_SPEC,)
