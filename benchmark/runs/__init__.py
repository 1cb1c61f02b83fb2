"""One run from its typed config to its run directory: the config and its identity
(``config``), run-directory files (``rundir``), checkpoints (``checkpoint``), experiment
tracking (``tracking``), trajectory reuse (``trajectory``), recorded (δ, τ) schedules read
from a run's metrics (``replay``), the backend registry (``backends``), one run's life from
its first file to its summary or failure record (``lifecycle``) and the simulated backend's
run (``runner``) (docs/design.md §9.3).

May import: every floor below it (foundation, ``netem``, ``clock``, ``planning``,
``compression``, ``methods``, ``tasks``, ``training``).
"""
