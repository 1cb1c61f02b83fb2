"""Read a Markdown table of a committed document back as rows (the results tests)."""

import re


def table(text: str, first: str, column: str = "") -> list[dict[str, str]]:
    """The rows, as ``{header: cell}``, of the first Markdown table whose header's first cell
    is ``first`` and whose header line contains ``column``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if re.match(rf"^\|\s*{re.escape(first)}\s*\|", line) and column in line)
    header = _cells(lines[start])
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, _cells(line), strict=True)))
    return rows


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]
