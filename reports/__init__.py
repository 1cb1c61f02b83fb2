"""Tables and figures built only from finished run directories (docs/reports.md).

Entry point: :func:`reports.build.write_report` (``decobench report DIR``).
"""
