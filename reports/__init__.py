"""Tables and figures built only from finished run directories (docs/reports.md).

Entry point: :func:`decobench.reports.build.write_report` (``decobench report DIR``).
"""
