"""Tables that fit: columns dropped by priority in a narrow terminal, plain lines wrapped at 80 columns elsewhere."""

import io
import re

from rich.console import Console

from cli.tables import Column, plain_line, print_rows, render_table, widths

COLUMNS = (Column("window"), Column("action", "left", plain="{value}"), Column("P95 s", plain="P95 {value} s"),
           Column("offered ev/s", priority=2), Column("best P95 s", priority=1),
           Column("why", "left", 3, flexible=True, max_width=60, plain="why: {value}"))
ROWS = [("1/2", "explore", "3.699", "300", "3.699", "optimistic gain 0.206s: predicted P95 4.006s"),
        ("2/2", "rollback", "12.500", "600", "3.699", "output behind input [95 %]")]


def _draw(width: int, terminal: bool = True) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=terminal, color_system=None)
    print_rows(console, "title", COLUMNS, ROWS)
    return buffer.getvalue()


def test_a_wide_terminal_shows_every_column_whole() -> None:
    text = _draw(200)
    assert all(c.header in text for c in COLUMNS)
    assert all(cell in text for row in ROWS for cell in row)


def test_a_narrow_terminal_drops_columns_by_priority_and_never_squeezes_the_rest() -> None:
    shown = widths(COLUMNS, ROWS, 45)
    assert [COLUMNS[i].header for i in shown] == ["window", "action", "P95 s", "best P95 s"]
    text = _draw(45)
    assert max(len(line) for line in text.splitlines()) <= 45
    for window, action, p95, *_ in ROWS:
        assert re.search(rf"{re.escape(window)} .*{action} .*{re.escape(p95)}", text)
    assert "offered" not in text and "why" not in text


def test_free_text_is_cut_with_an_ellipsis_to_the_room_left() -> None:
    shown = widths(COLUMNS, ROWS, 80)
    assert len(shown) == len(COLUMNS) and 12 <= shown[5] < 60
    text = _draw(80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert ROWS[0][5][:shown[5] - 1] + "…" in text and "output behind input [95 %]" in _draw(110)  # not markup


def test_the_priority_zero_columns_show_even_when_nothing_fits() -> None:
    assert list(widths(COLUMNS, ROWS, 10)) == [0, 1, 2]


def test_elsewhere_each_row_is_a_plain_line_with_every_column_wrapped_at_80() -> None:
    text = _draw(40, terminal=False)
    assert text.splitlines()[0] == "title"
    assert text == "\n".join(["title"] + [plain_line(COLUMNS, row) for row in ROWS]) + "\n"
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = re.split(r"\n(?! )", text.strip())[1:]  # a row's continuation lines are indented
    assert [" ".join(row.split()) for row in rows[1:]] == [
        "window 2/2 rollback P95 12.500 s offered ev/s 600 best P95 s 3.699 why: output behind input [95 %]"]
    assert rows[1].splitlines()[1].startswith("    ")


def test_a_rendered_table_has_the_fitting_columns_only() -> None:
    table = render_table("t", COLUMNS, ROWS, 45)
    assert [c.header for c in table.columns] == ["window", "action", "P95 s", "best P95 s"]
