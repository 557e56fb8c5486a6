"""A reader of Logstash's pipeline config language: find a plugin by its `id`, change its settings in place.

It follows the grammar of Logstash's own parser (logstash-core, `grammar.treetop`): sections `input`,
`filter` and `output` holding plugins and `if` / `else if` / `else` branches; a plugin's settings are
`name => value`, where a value is a bareword, a number, a quoted string, an array, a hash or a plugin
(`codec => json { ... }`). Conditions are read as text up to the brace that opens their block (strings,
regexps and brackets respected): nothing here needs their meaning. Each setting keeps the span of its
value in the source, so a patch rewrites those characters and leaves every other byte as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

SECTIONS = ("input", "filter", "output")
_NAME = re.compile(r"[A-Za-z0-9_@-]+")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?")
_CLOSING = {"[": "]", "(": ")"}

Scalar = str | int | float | bool


class LogstashConfigError(ValueError):
    """A pipeline config that cannot be read or patched; the message starts with `file:line:column`."""


@dataclass(frozen=True)
class Setting:
    """One `name => value` of a plugin, with where its value lies in the source."""

    name: str
    start: int
    end: int
    text: str  # the value as written

    @property
    def value(self) -> str:
        """The value as Logstash reads it (quotes and escapes removed)."""
        return _unquoted(self.text)


@dataclass
class Plugin:
    """A plugin block: its section, name, settings and where its closing brace is."""

    section: str
    name: str
    line: int
    settings: dict[str, Setting] = field(default_factory=dict)
    close: int = -1  # offset of the closing brace

    @property
    def id(self) -> str | None:
        setting = self.settings.get("id")
        return None if setting is None else setting.value


def _unquoted(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


class _Reader:
    """Recursive descent over the text, one cursor; collects the plugins of every section."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source, self.pos = text, source, 0
        self.plugins: list[Plugin] = []

    def error(self, what: str, at: int | None = None) -> LogstashConfigError:
        at = self.pos if at is None else at
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return LogstashConfigError(f"{self.source}:{line}:{column}: {what}")

    def line(self, at: int) -> int:
        return self.text.count("\n", 0, at) + 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip(self) -> None:
        """Whitespace and `#` comments."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char.isspace():
                self.pos += 1
            elif char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end + 1
            else:
                return

    def expect(self, token: str, what: str) -> None:
        self.skip()
        if not self.text.startswith(token, self.pos):
            found = self.peek() or "the end of the file"
            raise self.error(f"expected {what}, found {found!r}" if found != "the end of the file"
                             else f"expected {what}, found the end of the file")
        self.pos += len(token)

    def name(self, what: str) -> str:
        self.skip()
        if self.peek() in "\"'" and self.peek():
            return _unquoted(self.string())
        match = _NAME.match(self.text, self.pos)
        if not match:
            raise self.error(f"expected {what}, found {self.peek() or 'the end of the file'!r}")
        self.pos = match.end()
        return match.group()

    def string(self) -> str:
        quote, start = self.text[self.pos], self.pos
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\":
                self.pos += 2
                continue
            self.pos += 1
            if char == quote:
                return self.text[start:self.pos]
        raise self.error("unterminated string", start)

    def config(self) -> list[Plugin]:
        self.skip()
        while self.pos < len(self.text):
            at = self.pos
            section = self.name("input, filter or output")
            if section not in SECTIONS:
                raise self.error(f"expected input, filter or output, found {section!r}", at)
            self.expect("{", f"'{{' after {section}")
            self.block(section, f"{section} section", at)
            self.skip()
        return self.plugins

    def block(self, section: str, what: str, opened_at: int) -> None:
        """Plugins and branches up to the closing brace of the block `what`, opened at `opened_at`."""
        while True:
            self.skip()
            if self.peek() == "}":
                self.pos += 1
                return
            if not self.peek():
                raise self.error(f"expected '}}' to close the {what} of line {self.line(opened_at)}, "
                                 "found the end of the file")
            at = self.pos
            word = self.name("a plugin or an if")
            if word == "if":
                self.branch(section, at)
            elif word == "else":
                raise self.error("'else' without an 'if' before it", at)
            else:
                self.plugin(section, word, at)

    def branch(self, section: str, opened_at: int) -> None:
        self.condition()
        self.block(section, "if", opened_at)
        while True:
            self.skip()
            if not re.match(r"else\b", self.text[self.pos:self.pos + 5]):
                return
            at = self.pos
            self.pos += 4
            self.skip()
            if re.match(r"if\b", self.text[self.pos:self.pos + 3]):
                self.pos += 2
                self.condition()
                self.block(section, "else if", at)
            else:
                self.expect("{", "'{' after else")
                self.block(section, "else", at)
                return

    def condition(self) -> None:
        """Skip a condition up to and including the brace that opens its block."""
        start, stack = self.pos, []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in "\"'":
                self.string()
                continue
            if char == "/":  # conditions have no division: a slash opens a regexp
                end = re.compile(r"(?:[^/\\\n]|\\.)*/").match(self.text, self.pos + 1)
                if not end:
                    raise self.error("unterminated regexp")
                self.pos = end.end()
                continue
            if char in _CLOSING:
                stack.append(_CLOSING[char])
            elif char in "])":
                if not stack or stack.pop() != char:
                    raise self.error(f"unbalanced {char!r} in the condition")
            elif char == "{" and not stack:
                if not self.text[start:self.pos].strip():
                    raise self.error("an 'if' without a condition")
                self.pos += 1
                return
            self.pos += 1
        raise self.error("expected '{' after the condition, found the end of the file", start)

    def plugin(self, section: str, name: str, at: int) -> Plugin:
        plugin = Plugin(section, name, self.line(at))
        self.expect("{", f"'{{' after the plugin name {name!r}")
        self.plugins.append(plugin)
        while True:
            self.skip()
            if self.peek() == "}":
                plugin.close = self.pos
                self.pos += 1
                return plugin
            if not self.peek():
                raise self.error(f"expected '}}' to close plugin {name!r} (line {plugin.line}), "
                                 "found the end of the file")
            setting_at = self.pos
            setting = self.name(f"a setting of {name!r} or '}}'")
            self.expect("=>", f"'=>' after {setting!r}")
            self.skip()
            start = self.pos
            self.value(section)
            if setting in plugin.settings:
                raise self.error(f"setting {setting!r} given twice in plugin {name!r}", setting_at)
            plugin.settings[setting] = Setting(setting, start, self.pos, self.text[start:self.pos])

    def value(self, section: str) -> None:
        char = self.peek()
        if char in "\"'" and char:
            self.string()
        elif char == "[":
            self.sequence("]", section)
        elif char == "{":
            self.sequence("}", section, hash_entries=True)
        elif _NUMBER.match(self.text, self.pos) and (char.isdigit() or char == "-"):
            self.pos = _NUMBER.match(self.text, self.pos).end()
        elif _NAME.match(self.text, self.pos):
            at = self.pos
            word = self.name("a value")
            end = self.pos
            self.skip()
            if self.peek() == "{":  # a plugin as a value: `codec => json { charset => "UTF-8" }`
                self.plugins.remove(self.plugin(section, word, at))
            else:
                self.pos = end
        else:
            raise self.error(f"expected a value, found {char or 'the end of the file'!r}")

    def sequence(self, closing: str, section: str, hash_entries: bool = False) -> None:
        """An array `[a, b]` or a hash `{ k => v ... }` (commas between entries optional, as Logstash reads them)."""
        self.pos += 1
        while True:
            self.skip()
            if self.peek() == closing:
                self.pos += 1
                return
            if not self.peek():
                raise self.error(f"expected {closing!r}, found the end of the file")
            if hash_entries:
                self.value(section)
                self.expect("=>", "'=>' in the hash")
                self.skip()
            self.value(section)
            self.skip()
            if self.peek() == ",":
                self.pos += 1


def read_plugins(text: str, source: str = "pipeline.conf") -> list[Plugin]:
    """Every plugin of every section, in order (plugins used as values, such as codecs, left out)."""
    return _Reader(text, source).config()


def _render(value: Scalar, written: str | None) -> str:
    """`value` as Logstash reads it: a string quoted as the old value was (double quotes for a new one,
    bare only where the operator wrote it bare), a number or boolean bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) and not value.is_integer() else str(int(value))
    if written and written[0] not in "\"'" and _NAME.fullmatch(value):
        return value
    quote = written[0] if written and written[0] in "\"'" else '"'
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def find_plugin(plugins: list[Plugin], plugin_id: str, *, section: str, name: str, source: str) -> Plugin:
    """The `section` plugin called `name` whose `id` is `plugin_id`; the error lists the ids there are."""
    same_kind = [p for p in plugins if p.section == section and p.name == name]
    chosen = [p for p in same_kind if p.id == plugin_id]
    if len(chosen) == 1:
        return chosen[0]
    if len(chosen) > 1:
        lines = ", ".join(str(p.line) for p in chosen)
        raise LogstashConfigError(f"{source}: {len(chosen)} {section} {name} plugins have id {plugin_id!r} "
                                  f"(lines {lines}); ids must be unique")
    ids = ", ".join(f"{p.id!r} (line {p.line})" if p.id else f"no id (line {p.line})" for p in same_kind)
    raise LogstashConfigError(f"{source}: no {section} {name} plugin with id {plugin_id!r}; "
                              f"found {ids or f'no {section} {name} plugin'}")


def patch_plugin(text: str, plugin_id: str, values: Mapping[str, Scalar], *, section: str = "output",
                 name: str = "kafka", source: str = "pipeline.conf") -> str:
    """`text` with the settings `values` of one plugin changed or added; every other byte as it was."""
    plugin = find_plugin(read_plugins(text, source), plugin_id, section=section, name=name, source=source)
    edits: list[tuple[int, int, str]] = []
    added = []
    for key, value in values.items():
        setting = plugin.settings.get(key)
        if setting is None:
            added.append(f"{key} => {_render(value, None)}")
        elif _unquoted(setting.text) != _unquoted(_render(value, setting.text)):
            edits.append((setting.start, setting.end, _render(value, setting.text)))
    if added:
        edits.append(_insertion(text, plugin, added))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    read_plugins(text, source)  # what was written must read back
    return text


def _insertion(text: str, plugin: Plugin, lines: list[str]) -> tuple[int, int, str]:
    """Where new settings go: on lines of their own before the closing brace, indented as their siblings."""
    line_start = text.rfind("\n", 0, plugin.close) + 1
    brace_indent = text[line_start:plugin.close]
    if plugin.settings:
        last = max(plugin.settings.values(), key=lambda s: s.start)
        last_line = text.rfind("\n", 0, last.start) + 1
        indent = re.match(r"[ \t]*", text[last_line:]).group()
    else:
        indent = brace_indent + "  "
    if brace_indent.strip():  # a plugin written on one line stays on one line
        space = "" if text[plugin.close - 1].isspace() else " "
        return plugin.close, plugin.close, space + "".join(f"{line} " for line in lines)
    return line_start, line_start, "".join(f"{indent}{line}\n" for line in lines)
