"""Tables that stay readable wherever they are printed: in a terminal, columns that do not fit are dropped
by priority (never squeezed to nothing); anywhere else (a pipe, a file, CI) each row is a plain line,
wrapped at 80 columns with its continuation lines indented."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

# What a column costs beside its text in rich's default box: one space each side and a border.
_COLUMN_FRAME = 3
_TABLE_FRAME = 1  # the closing border
_FLEXIBLE_MIN = 12  # a free-text column shown narrower than this says nothing
PLAIN_WIDTH = 80  # a pipe has no width: a log read in a terminal or an editor, or pasted, should not need more
_INDENT = "    "  # a plain row's continuation lines


@dataclass(frozen=True)
class Column:
    """A column: its header, alignment, priority (0 = always shown; higher numbers go first when
    the terminal is narrow), whether it is free text that may be cut short with an ellipsis, and how
    a cell reads on a plain line."""

    header: str
    justify: str = "right"
    priority: int = 0
    flexible: bool = False
    max_width: int | None = None
    plain: str = "{header} {value}"  # how a cell reads on a plain line, e.g. "P95 {value} s"


def _natural(column: Column, cells: Sequence[str]) -> int:
    natural = max([len(column.header), *(len(c) for c in cells)])
    return min(natural, column.max_width) if column.max_width is not None else natural


def _narrowest(column: Column, cells: Sequence[str]) -> int:
    natural = _natural(column, cells)
    return min(natural, max(_FLEXIBLE_MIN, len(column.header))) if column.flexible else natural


def widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> dict[int, int]:
    """Text width of each column to show in `width` characters, by index. Every priority-0 column shows;
    the others join from the lowest priority number up while their narrowest readable width still fits;
    free-text columns then share what is left, up to their natural width."""
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    narrowest = [_narrowest(c, cells[i]) for i, c in enumerate(columns)]
    chosen = [i for i, c in enumerate(columns) if c.priority == 0]
    used = _TABLE_FRAME + sum(narrowest[i] + _COLUMN_FRAME for i in chosen)
    for i in sorted((i for i, c in enumerate(columns) if c.priority > 0), key=lambda i: columns[i].priority):
        if used + narrowest[i] + _COLUMN_FRAME <= width:
            chosen.append(i)
            used += narrowest[i] + _COLUMN_FRAME
    shown = {i: narrowest[i] for i in sorted(chosen)}
    for i in (i for i in shown if columns[i].flexible):  # left to right: the first free-text column fills first
        grow = min(_natural(columns[i], cells[i]) - shown[i], max(width - used, 0))
        shown[i] += grow
        used += grow
    return shown


def render_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Table:
    """A rich table of the columns that fit in `width`, each at a width its text fits (free text cut with …)."""
    table = Table(title=title, expand=False)
    shown = widths(columns, rows, width)
    for i, column_width in shown.items():
        table.add_column(columns[i].header, justify=columns[i].justify,  # type: ignore[arg-type]
                         no_wrap=True, overflow="ellipsis", width=column_width)
    for row in rows:
        table.add_row(*(Text(row[i]) for i in shown))  # Text: a cell's brackets are never markup
    return table


def plain_line(columns: Sequence[Column], row: Sequence[str], prefix: str = "") -> str:
    """One row with every column, each cell as its column's `plain` says, for output that is not a terminal:
    `prefix` and the cells, wrapped at `PLAIN_WIDTH` between cells where they fit (inside a free-text cell
    where not). A row's first line starts at the margin and the rest are indented, so each row still
    starts a line of its own."""
    cells = [c.plain.format(header=c.header, value=cell) for c, cell in zip(columns, row) if cell]
    lines = [prefix + cells[0]] if cells else [prefix]
    for cell in cells[1:]:
        if len(lines[-1]) + 2 + len(cell) <= PLAIN_WIDTH:
            lines[-1] += "  " + cell
        else:
            lines.append(_INDENT + cell)
    return "\n".join(wrapped for line in lines
                     for wrapped in textwrap.wrap(line, PLAIN_WIDTH, subsequent_indent=_INDENT,
                                                  break_long_words=False, break_on_hyphens=False))


def print_rows(console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
    """The whole table: drawn to fit a terminal, or a title line and one plain line per row."""
    if console.is_terminal:
        console.print(render_table(title, columns, rows, console.width))
        return
    console.print(textwrap.fill(title, PLAIN_WIDTH), markup=False, highlight=False, soft_wrap=True)
    for row in rows:
        console.print(plain_line(columns, row), markup=False, highlight=False, soft_wrap=True)
