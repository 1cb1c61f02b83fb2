"""Rendering a report document as Markdown, one self-contained HTML file, CSV and LaTeX.

A document is a list of blocks (:class:`Heading`, :class:`Para`, :class:`Bullets`,
:class:`TableBlock`, :class:`FigureBlock`). Markdown links the figures under ``figures/``;
HTML embeds them as base64 PNG ``<img>`` and uses no scripts. LaTeX tables are ``tabular``
environments with booktabs rules (``\\usepackage{booktabs}``), every cell escaped. Output
depends only on the blocks: no dates, no machine-specific paths.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decobench.reports.figures import FigureFile
from decobench.reports.tables import Table, group


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class TableBlock:
    table: Table


@dataclass(frozen=True)
class FigureBlock:
    figure: FigureFile


Block = Heading | Para | Bullets | TableBlock | FigureBlock


def cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def table_groups(table: Table) -> list[tuple[str, tuple[str, ...], list[dict[str, Any]]]]:
    """(heading, columns, rows) for each group of ``table.group_by`` (one untitled group if
    none); columns empty throughout a group are left out of it."""
    if not table.group_by:
        return [("", table.columns, list(table.rows))]
    out = []
    for key, rows in group(table.rows, lambda row: tuple(row[c] for c in table.group_by)).items():
        heading = ", ".join(f"{c} {v}" if c == "workers" else str(v)
                            for c, v in zip(table.group_by, key, strict=True))
        columns = tuple(c for c in table.columns if c not in table.group_by
                        and any(cell_text(row.get(c)) for row in rows))
        out.append((heading, columns, rows))
    return out


# ------------------------------------------------------------------------------- markdown
def _md_cell(value: Any) -> str:
    return cell_text(value).replace("|", "\\|").replace("\n", " ") or " "


def _md_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(c) for c in columns) + " |",
             "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def to_markdown(blocks: Sequence[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Para):
            lines += [block.text, ""]
        elif isinstance(block, Bullets):
            lines += [f"- {item}" for item in block.items] + [""]
        elif isinstance(block, TableBlock):
            if block.table.note:
                lines += [block.table.note, ""]
            for heading, columns, rows in table_groups(block.table):
                if heading:
                    lines += [f"**{heading}**", ""]
                lines += _md_table(columns, rows) + [""]
            lines += [f"(CSV: `tables/{block.table.name}.csv`, LaTeX: "
                      f"`tables/{block.table.name}.tex`)", ""]
        elif isinstance(block, FigureBlock):
            f = block.figure
            lines += [f"![{f.title}](figures/{f.name}.png)", "",
                      f"*{f.title}.* {f.caption} ([SVG](figures/{f.name}.svg))", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ----------------------------------------------------------------------------------- html
CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.4}table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}figure{margin:1em 0 2em}
figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#444}
h4{margin-bottom:.2em}.files{font-size:.8em;color:#666}"""


def _html_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[str]:
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns)
           + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(f"<td>{html.escape(cell_text(row.get(c)))}</td>" for c in columns)
            + "</tr>" for row in rows]
    return out + ["</tbody>", "</table>"]


def to_html(blocks: Sequence[Block], title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>"]
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            out.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Bullets):
            out += ["<ul>"] + [f"<li>{html.escape(i)}</li>" for i in block.items] + ["</ul>"]
        elif isinstance(block, TableBlock):
            if block.table.note:
                out.append(f"<p>{html.escape(block.table.note)}</p>")
            for heading, columns, rows in table_groups(block.table):
                if heading:
                    out.append(f"<h4>{html.escape(heading)}</h4>")
                out += _html_table(columns, rows)
            name = html.escape(block.table.name)
            out.append(f'<p class="files">CSV: tables/{name}.csv, LaTeX: tables/{name}.tex</p>')
        elif isinstance(block, FigureBlock):
            f = block.figure
            data = base64.b64encode(f.png).decode("ascii")
            out += ["<figure>", f'<img alt="{html.escape(f.title)}" '
                    f'src="data:image/png;base64,{data}">',
                    f"<figcaption><b>{html.escape(f.title)}.</b> {html.escape(f.caption)}"
                    "</figcaption>", "</figure>"]
    return "\n".join(out + ["</body>", "</html>"]) + "\n"


# ------------------------------------------------------------------------------------ csv
def to_csv(table: Table) -> str:
    """All columns (display and extra), header first, ``\\n`` line endings."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.csv_columns)
    for row in table.rows:
        writer.writerow([cell_text(row.get(c)) for c in table.csv_columns])
    return buffer.getvalue()


# ---------------------------------------------------------------------------------- latex
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
          "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
          "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
          "δ": r"$\delta$", "τ": r"$\tau$", "Φ": r"$\Phi$", "ρ": r"$\rho$", "≥": r"$\geq$",
          "≤": r"$\leq$", "–": "--", "×": r"$\times$", "[": "{[}", "]": "{]}"}


def latex_escape(text: str) -> str:
    """Text safe in a LaTeX text-mode cell: specials, ``<``/``>``, Greek letters, and brackets
    braced (a cell starting with ``[`` after ``\\`` would be read as its optional argument)."""
    text = text.replace(">=", "≥").replace("<=", "≤")
    return "".join(_LATEX.get(ch, ch) for ch in text)


def to_latex(table: Table) -> str:
    """A booktabs ``tabular`` of the display columns (every row, one table)."""
    columns = table.columns
    lines = [f"% {latex_escape(table.title)} (decobench report; needs \\usepackage{{booktabs}})",
             "\\begin{tabular}{" + "l" * len(columns) + "}", "\\toprule",
             " & ".join(latex_escape(c) for c in columns) + r" \\", "\\midrule"]
    lines += [" & ".join(latex_escape(cell_text(row.get(c))) for c in columns) + r" \\"
              for row in table.rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
