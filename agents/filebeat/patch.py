"""An operator's Filebeat 7.17 config, patched rather than regenerated.

`discover` reads filebeat.yml and the input files it loads (`filebeat.config.inputs`), finds the inputs
the agent is told to tune (by filestream `id`, or by a glob over a `log` input's paths) and the output
in use. `patch` then rewrites only the tuned keys of those inputs, of `queue.mem` and of that output,
leaving every other byte of every file as it was.
"""

from __future__ import annotations

import fnmatch
import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agents.filebeat.render import duration_value
from agents.yaml_patch import Edit, YamlPatchError, apply, compose, edits_for, line_of, lookup
from models.space import Value

# pipetune's parameter -> the key a `log` input spells it with, and a `filestream` input.
INPUT_KEYS: dict[str, tuple[str | None, str | None]] = {
    "filebeat.scan_frequency": ("scan_frequency", "prospector.scanner.check_interval"),
    "filebeat.backoff": ("backoff", "backoff.init"),
    "filebeat.max_backoff": ("max_backoff", "backoff.max"),
    "filebeat.backoff_factor": ("backoff_factor", None),  # filestream's backoff always doubles
    "filebeat.close_inactive": ("close_inactive", "close.on_state_change.inactive"),
    "filebeat.harvester_buffer_size": ("harvester_buffer_size", "buffer_size"),
    "filebeat.multiline.timeout": ("multiline.timeout", None),  # filestream: in its multiline parser
}
QUEUE_KEYS = {"filebeat.queue.mem.events": "queue.mem.events",
              "filebeat.queue.mem.flush.min_events": "queue.mem.flush.min_events",
              "filebeat.queue.mem.flush.timeout": "queue.mem.flush.timeout"}
OUTPUT_KEYS = {"filebeat.output.bulk_max_size": "bulk_max_size", "filebeat.output.worker": "worker",
               "filebeat.output.pipelining": "pipelining"}
DURATIONS = frozenset({"filebeat.scan_frequency", "filebeat.backoff", "filebeat.max_backoff",
                       "filebeat.close_inactive", "filebeat.multiline.timeout", "filebeat.queue.mem.flush.timeout"})
OUTPUTS = ("kafka", "logstash")


class FilebeatConfigError(ValueError):
    """An operator's Filebeat config pipetune cannot tune; the message names the file and line."""


@dataclass(frozen=True)
class InputSelector:
    """Which inputs to tune: a filestream `id`, or a glob one of a `log` input's paths matches."""

    id: str | None = None
    path_glob: str | None = None

    def matches(self, input_id: str | None, paths: tuple[str, ...]) -> bool:
        if self.id is not None:
            return input_id == self.id
        return any(fnmatch.fnmatch(path, self.path_glob) or path == self.path_glob for path in paths)

    def __str__(self) -> str:
        return f"id {self.id!r}" if self.id is not None else f"paths matching {self.path_glob!r}"


@dataclass(frozen=True)
class TunedInput:
    """One selected input: where it is written and what it is."""

    file: Path
    index: int  # its position in that file's list of inputs
    line: int
    type: str
    id: str | None
    paths: tuple[str, ...]


@dataclass(frozen=True)
class FilebeatFiles:
    """What the agent manages of an operator's Filebeat."""

    config: Path
    inputs: tuple[TunedInput, ...]
    output: str  # kafka | logstash

    def files(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys([self.config, *(tuned.file for tuned in self.inputs)]))


def _read(path: Path) -> tuple[str, Node]:
    try:
        text = path.read_text()
    except OSError as err:
        raise FilebeatConfigError(f"{path}: cannot read it ({err.strerror})") from None
    try:
        return text, compose(text, str(path))
    except YamlPatchError as err:
        raise FilebeatConfigError(str(err)) from None


def _scalar(node: Node | None) -> str | None:
    return str(node.value) if isinstance(node, ScalarNode) else None


def _paths(node: MappingNode) -> tuple[str, ...]:
    paths = lookup(node, "paths")
    return tuple(str(item.value) for item in paths.value if isinstance(item, ScalarNode)) \
        if isinstance(paths, SequenceNode) else ()


def _inputs_in(path: Path, node: Node | None) -> list[TunedInput]:
    if node is None:
        return []
    if not isinstance(node, SequenceNode):
        raise FilebeatConfigError(f"{path}:{line_of(node)}: expected a list of inputs")
    return [TunedInput(path, i, line_of(item), _scalar(lookup(item, "type")) or "log", _scalar(lookup(item, "id")),
                       _paths(item))
            for i, item in enumerate(node.value) if isinstance(item, MappingNode)]


def _external_inputs(config: Path, root: MappingNode) -> list[TunedInput]:
    """The inputs of the files `filebeat.config.inputs` loads."""
    loader = lookup(root, "filebeat.config.inputs")
    if not isinstance(loader, MappingNode) or _scalar(lookup(loader, "enabled")) == "false":
        return []
    pattern = _scalar(lookup(loader, "path")) or ""
    pattern = pattern.replace("${path.config}", str(config.parent))
    found = []
    for name in sorted(glob.glob(str(config.parent / pattern))):
        text, node = _read(Path(name))
        found += _inputs_in(Path(name), node)
    return found


def discover(config: Path, selectors: list[InputSelector]) -> FilebeatFiles:
    """The inputs `selectors` pick in `config` and its input files, and the output in use."""
    _, root = _read(config)
    if not isinstance(root, MappingNode):
        raise FilebeatConfigError(f"{config}:{line_of(root)}: expected a mapping of settings")
    every = _inputs_in(config, lookup(root, "filebeat.inputs")) + _external_inputs(config, root)
    chosen: list[TunedInput] = []
    for selector in selectors:
        matched = [tuned for tuned in every if selector.matches(tuned.id, tuned.paths)]
        if not matched:
            known = "; ".join(f"{t.file.name}:{t.line} {t.type} id={t.id!r} paths={list(t.paths)}" for t in every)
            raise FilebeatConfigError(f"{config}: no input has {selector}; inputs found: {known or 'none'}")
        chosen += [tuned for tuned in matched if tuned not in chosen]
    outputs = [name for name in OUTPUTS if isinstance(lookup(root, f"output.{name}"), MappingNode)
               and _scalar(lookup(root, f"output.{name}.enabled")) != "false"]
    if len(outputs) != 1:
        raise FilebeatConfigError(f"{config}: expected one output.kafka or output.logstash to tune, "
                                  f"found {', '.join(outputs) or 'neither'}")
    return FilebeatFiles(config, tuple(chosen), outputs[0])


def _value(param: str, value: Value) -> Value:
    return duration_value(param, value) if param in DURATIONS else value


def _input_edits(text: str, tuned: TunedInput, item: MappingNode, values: Mapping[str, Value]) -> list[Edit]:
    keys = {}
    for param, value in values.items():
        if param not in INPUT_KEYS:
            continue
        key = INPUT_KEYS[param][0 if tuned.type == "log" else 1]
        if key is not None:
            keys[key] = _value(param, value)
    edits = edits_for(text, item, keys, str(tuned.file))
    timeout = values.get("filebeat.multiline.timeout")
    parsers = lookup(item, "parsers")
    if tuned.type == "filestream" and timeout is not None and isinstance(parsers, SequenceNode):
        for parser in parsers.value:
            multiline = lookup(parser, "multiline") if isinstance(parser, MappingNode) else None
            if isinstance(multiline, MappingNode):
                edits += edits_for(text, multiline, {"timeout": _value("filebeat.multiline.timeout", timeout)},
                                   str(tuned.file))
    return edits


def patch(files: FilebeatFiles, values: Mapping[str, Value]) -> dict[Path, str]:
    """The new text of each file `values` change (files left as they are are not in the result)."""
    texts = {path: path.read_text() for path in files.files()}
    edits: dict[Path, list[Edit]] = {path: [] for path in texts}
    roots = {path: compose(text, str(path)) for path, text in texts.items()}
    for tuned in files.inputs:
        inputs = roots[tuned.file] if tuned.file != files.config else lookup(roots[tuned.file], "filebeat.inputs")
        edits[tuned.file] += _input_edits(texts[tuned.file], tuned, inputs.value[tuned.index], values)
    top = {QUEUE_KEYS[p]: _value(p, v) for p, v in values.items() if p in QUEUE_KEYS}
    top |= {f"output.{files.output}.{OUTPUT_KEYS[p]}": v for p, v in values.items()
            if p in OUTPUT_KEYS and not (p == "filebeat.output.pipelining" and files.output != "logstash")}
    edits[files.config] += edits_for(texts[files.config], roots[files.config], top, str(files.config))
    return {path: apply(texts[path], found) for path, found in edits.items() if found}
