"""The front ends: ``decobench``'s command line (``main``; its run flags ``flags`` and the
registries' metadata ``metadata``), ``decobench data`` (``data``, ``fetch``), ``decobench
versus`` (``versus``) and ``decobench bench`` (``bench``).

May import: anything (the floors of ``decobench``, ``decobench.baselines`` and
``decobench.reports``); nothing imports the front ends.
"""
