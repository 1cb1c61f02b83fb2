"""Baseline methods of the paper's comparison, registered with the method registry.

Each baseline reuses the shared machinery of :mod:`benchmark` (compressors, error
feedback, delay queue, shared optimizer); see docs/design.md §8 and the
method cards in ``docs/methods/``.
"""

from decobench.baselines.accordion import ACCORDION_SPEC
from decobench.baselines.cocktail import COCKTAIL_SGD_SPEC
from decobench.baselines.cocktail_topk import COCKTAIL_TOPK_SPEC
from decobench.baselines.dga import DGA_SPEC
from decobench.baselines.dsgd import DSGD_SPEC
from decobench.baselines.static_mean_plan import STATIC_MEAN_PLAN_SPEC

BASELINE_SPECS = (DSGD_SPEC, ACCORDION_SPEC, DGA_SPEC, COCKTAIL_SGD_SPEC, COCKTAIL_TOPK_SPEC,
                  STATIC_MEAN_PLAN_SPEC)
