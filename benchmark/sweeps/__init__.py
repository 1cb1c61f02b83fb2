"""Many runs: suites and their cells (``suite``), one cell in a worker (``cell``), where
cells run (``executors``: local processes, Slurm, Ray), the resumable sweep (``sweep``) and
what a suite costs (``cost``) (docs/suites.md).

May import: every floor below it, ``decobench.emulated`` included.
"""
