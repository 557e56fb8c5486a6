"""Change some keys of an operator's YAML file (filebeat.yml, an inputs file, pipelines.yml) in place.

ruamel.yaml composes the document with the position of every node, so a change rewrites the characters
of one scalar and nothing else: comments, key order, quoting, anchors and every untouched key stay as
the operator wrote them. A key the file lacks is added on a line of its own, indented as its siblings.
Keys may be nested or dotted, as Beats and Logstash both read them (`queue.mem.events: 4096`,
`queue: {mem: {events: 4096}}` or any mix); a key is changed where it is written. Values are written
so that a YAML 1.1 reader (Beats' go-yaml, Logstash) reads them back as given: `on` is quoted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode
from ruamel.yaml.reader import ReaderError

Scalar = str | int | float | bool


class YamlPatchError(ValueError):
    """A YAML file that cannot be read or patched; the message names the file and line."""


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] with `text`."""

    start: int
    end: int
    text: str


def utf8_text(path: Path) -> str:
    """A file's text; `YamlPatchError` naming the file and its first byte that is not UTF-8 (binary garbage, another
    encoding). `OSError` when it cannot be read."""
    data = path.read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise YamlPatchError(f"{path} is not UTF-8 text: byte {err.start} ({data[err.start:err.start + 1]!r}) "
                             f"{err.reason}") from None


def read_document(path: Path) -> tuple[str, Node]:
    """A YAML file's text and node tree (`utf8_text`, `compose`)."""
    text = utf8_text(path)
    return text, compose(text, str(path))


def compose(text: str, source: str) -> Node:
    """The document's node tree, with positions; a YAML error names `source` and the line."""
    try:
        node = YAML().compose(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise YamlPatchError(f"{where}: {err.problem or err.context}") from None
    except ReaderError as err:  # a character YAML does not allow (binary garbage): no mark, a position
        line = text.count("\n", 0, err.position) + 1
        code = ord(err.character) if isinstance(err.character, str) else err.character
        raise YamlPatchError(f"{source}:{line}: unacceptable character #x{code:04x}: {err.reason}") from None
    except RecursionError:
        raise YamlPatchError(f"{source}: nested too deeply to read") from None
    if node is None:
        raise YamlPatchError(f"{source}: the file is empty")
    return node


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


def key_splits(dotted: str) -> list[tuple[str, str]]:
    """The ways Beats reads `dotted` as a key written here and the rest of it nested below, longest key
    first: `a.b.c` is ("a.b.c", ""), ("a.b", "c"), ("a", "b.c")."""
    parts = dotted.split(".")
    return [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts), 0, -1)]


def lookup(mapping: MappingNode, dotted: str) -> Node | None:
    """The value node of `dotted` in `mapping`, however the key is split between nesting and dots."""
    for key, rest in key_splits(dotted):
        for key_node, value_node in mapping.value:
            if key_node.value != key:
                continue
            if not rest:
                return value_node
            if isinstance(value_node, MappingNode):
                found = lookup(value_node, rest)
                if found is not None:
                    return found
    return None


def _deepest_holder(mapping: MappingNode, dotted: str) -> tuple[MappingNode, str]:
    """The innermost block mapping already holding a prefix of `dotted`, and the rest of the key."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        inner = lookup(mapping, ".".join(parts[:i]))
        if isinstance(inner, MappingNode) and not inner.flow_style:
            return _deepest_holder(inner, ".".join(parts[i:]))
    return mapping, dotted


def render(value: Scalar, like: ScalarNode | None = None) -> str:
    """`value` as a YAML scalar, quoted as the value it replaces was (plain when that reads back the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) and not value.is_integer() else str(int(value))
    style = like.style if like is not None else None
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    if style == '"' or yaml.safe_load(value) != value:
        return json.dumps(value)
    return value


def _same(current: object, wanted: Scalar) -> bool:
    """Whether the value in force already is `wanted` (1024 and 1024.0 alike; "1" and 1 not)."""
    if isinstance(current, bool) or isinstance(wanted, bool):
        return current is wanted
    if isinstance(current, (int, float)) and isinstance(wanted, (int, float)):
        return float(current) == float(wanted)
    return current == wanted


def edits_for(text: str, mapping: MappingNode, values: Mapping[str, Scalar], source: str) -> list[Edit]:
    """The edits that give `mapping` the keys `values`: scalars rewritten, absent keys added."""
    edits = []
    for key, value in values.items():
        node = lookup(mapping, key)
        if node is None:
            holder, rest = _deepest_holder(mapping, key)
            edits.append(_insertion(text, holder, rest, render(value), source))
        elif not isinstance(node, ScalarNode):
            raise YamlPatchError(f"{source}:{line_of(node)}: {key} is not a single value")
        elif not _same(yaml.safe_load(text[node.start_mark.index:node.end_mark.index]), value):
            edits.append(Edit(node.start_mark.index, node.end_mark.index, render(value, node)))
    return edits


def _insertion(text: str, mapping: MappingNode, key: str, value: str, source: str) -> Edit:
    if mapping.flow_style or not mapping.value:
        raise YamlPatchError(f"{source}:{line_of(mapping)}: cannot add {key} to a flow-style or empty mapping")
    column = mapping.value[0][0].start_mark.column
    end = _end(mapping.value[-1][1])
    newline = text.find("\n", end)
    at = end if text[end - 1:end] == "\n" else len(text) if newline < 0 else newline + 1  # a `|` block ends past its newline
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    return Edit(at, at, f"{prefix}{' ' * column}{key}: {value}\n")


def _end(node: Node) -> int:
    """Where the text of `node` ends: a block collection's own end mark lies past the comments and blank
    lines that follow it, so it ends with its last item."""
    if isinstance(node, ScalarNode) or node.flow_style or not node.value:
        return node.end_mark.index
    last = node.value[-1]
    return _end(last[1] if isinstance(last, tuple) else last)


def apply(text: str, edits: list[Edit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:edit.start] + edit.text + text[edit.end:]
    return text
