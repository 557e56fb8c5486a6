"""Java `.properties` files (Kafka clients' `producer.properties`, `consumer.properties`): read them, and
change some values in place leaving every other byte as it was.

The format as `java.util.Properties` reads it: a key ends at the first unescaped `=`, `:` or whitespace;
`#` and `!` start comment lines; a line ending in an odd number of backslashes continues on the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Mapping

_KEY_END = re.compile(r"(?:[^\\=:\s]|\\.)*")
_SEPARATOR = re.compile(r"[ \t\f]*[=:]?[ \t\f]*")


@dataclass(frozen=True)
class Entry:
    """One `key=value` of the file and where its value lies (offsets into the text)."""

    key: str
    value: str
    line: int
    value_start: int
    value_end: int


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(m.group(1), m.group(1)), text)


def _logical_lines(text: str) -> Iterator[tuple[int, int, int]]:
    """(first line number, start offset, end offset) of each logical line, continuations joined."""
    offset, number = 0, 1
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        start, first = offset, number
        while True:
            line = lines[i]
            offset += len(line)
            number += 1
            i += 1
            body = line.rstrip("\r\n")
            trailing = len(body) - len(body.rstrip("\\"))
            if trailing % 2 == 0 or i >= len(lines):
                break
        end = start + len(text[start:offset].rstrip("\r\n"))
        yield first, start, end


def entries(text: str) -> list[Entry]:
    """Every `key=value` of `text`, in order (a key given twice appears twice; the last one wins)."""
    found = []
    for line, start, end in _logical_lines(text):
        body = text[start:end]
        stripped = body.lstrip(" \t\f")
        if not stripped or stripped[0] in "#!":
            continue
        key_start = start + len(body) - len(stripped)
        key_end = _KEY_END.match(text, key_start, end).end()
        value_start = _SEPARATOR.match(text, key_end, end).end()
        value = re.sub(r"\\\r?\n[ \t\f]*", "", text[value_start:end])
        found.append(Entry(_unescape(text[key_start:key_end]), _unescape(value), line, value_start, end))
    return found


def read(text: str) -> dict[str, str]:
    """The properties `text` defines (the last value of a key given twice)."""
    return {entry.key: entry.value for entry in entries(text)}


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def patch(text: str, values: Mapping[str, str]) -> str:
    """`text` with `values` set: a key present has its (last) value rewritten in place, a key absent is
    appended as `key=value`; comments, order, separators and every other line stay as they were."""
    last = {entry.key: entry for entry in entries(text)}
    edits = sorted(((last[key].value_start, last[key].value_end, _escaped(value))
                    for key, value in values.items() if key in last and last[key].value != value), reverse=True)
    for start, end, new in edits:
        text = text[:start] + new + text[end:]
    added = [f"{key}={_escaped(value)}\n" for key, value in values.items() if key not in last]
    if added and text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(added)
