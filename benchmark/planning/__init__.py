"""DeCo's planner: the link estimators â, b̂, T̂ (``estimators``), the noise term Φ
(``phi``) and Algorithm 1 with its fallback objective (``planner``) (docs/design.md §5).

May import: the foundation, ``decobench.netem`` and ``decobench.clock``.
"""
