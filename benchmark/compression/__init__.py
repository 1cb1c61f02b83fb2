"""Compressors and their memory: Top-k and the ``Compressed`` message a
compressor owns (``compressors``), error feedback (``error_feedback``) and each compressor's
wire form for real collectives (``codec``) (docs/design.md §2.1, §2.2, §3; GRACE's
compressor / memory split).

May import: the foundation, ``decobench.netem``, ``decobench.clock`` and
``decobench.planning``.
"""
