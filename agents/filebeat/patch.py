"""An operator's Filebeat 7.17 config, patched rather than regenerated.

`discover` reads filebeat.yml and the input files it loads (`filebeat.config.inputs`), finds the inputs
the agent is told to tune (by filestream `id`, or by a glob over a `log` input's paths) and the output
in use. `patch` then rewrites only the tuned keys of those inputs, of `queue.mem` and of that output that do
not hold their new values yet, leaving every other byte of every file as it was; given the values the agent last
wrote, it refuses to overwrite a key changed by hand since (agents/rebase.py). `on_disk` says what each tuned key
holds now: where a file sets none, what Filebeat reads for that input type.
"""

from __future__ import annotations

import fnmatch
import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import yaml
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agents.filebeat.render import duration_value, go_seconds
from agents.rebase import OnDisk, to_rewrite
from agents.yaml_patch import Edit, YamlPatchError, apply, edits_for, line_of, lookup, read_document
from models.space import PIPELINE_SPACE, Value

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
# What a filestream input of Filebeat 7.17 reads where it sets none, when it differs from the `log` input's (the
# parameters' defaults): filebeat/input/filestream/config.go defaultConfig(). Its backoff starts at 2s, and it never
# closes an idle file (close.on_state_change.inactive 0).
FILESTREAM_DEFAULTS: dict[str, Value] = {"filebeat.backoff": 2.0, "filebeat.close_inactive": 0.0}


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
        return read_document(path)
    except OSError as err:
        raise FilebeatConfigError(f"{path}: cannot read it ({err.strerror})") from None
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


def _as_read(param: str, value: Value) -> Value:
    """`value` as Filebeat reads it back once written (a duration as rounded by `_value`)."""
    return go_seconds(str(_value(param, value))) if param in DURATIONS else value  # type: ignore[return-value]


@dataclass(frozen=True)
class _Key:
    """One tuned key of one file: the mapping it is (or would be) written in, and what Filebeat reads without it."""

    param: str
    file: Path
    holder: MappingNode
    key: str
    default: Value


def _default(param: str, input_type: str | None) -> Value:
    return FILESTREAM_DEFAULTS.get(param, PIPELINE_SPACE[param].default) if input_type == "filestream" \
        else PIPELINE_SPACE[param].default


def _multiline_parsers(item: MappingNode) -> list[MappingNode]:
    parsers = lookup(item, "parsers")
    found = [lookup(parser, "multiline") for parser in parsers.value if isinstance(parser, MappingNode)] \
        if isinstance(parsers, SequenceNode) else []
    return [multiline for multiline in found if isinstance(multiline, MappingNode)]


def _keys(files: FilebeatFiles, roots: Mapping[Path, Node], params: Iterable[str]) -> list[_Key]:
    """Where each of `params` is tuned: in every selected input, `queue.mem` and the output in use."""
    params = set(params)
    keys = []
    for tuned in files.inputs:
        root = roots[tuned.file]
        item = (root if tuned.file != files.config else lookup(root, "filebeat.inputs")).value[tuned.index]
        for param, names in INPUT_KEYS.items():
            key = names[0 if tuned.type == "log" else 1]
            if key is not None and param in params:
                keys.append(_Key(param, tuned.file, item, key, _default(param, tuned.type)))
        if tuned.type == "filestream" and "filebeat.multiline.timeout" in params:
            keys += [_Key("filebeat.multiline.timeout", tuned.file, multiline, "timeout",
                          _default("filebeat.multiline.timeout", tuned.type)) for multiline in _multiline_parsers(item)]
    top = QUEUE_KEYS | {p: f"output.{files.output}.{key}" for p, key in OUTPUT_KEYS.items()
                        if not (p == "filebeat.output.pipelining" and files.output != "logstash")}
    return keys + [_Key(p, files.config, roots[files.config], key, _default(p, None))  # type: ignore[arg-type]
                   for p, key in top.items() if p in params]


def _on_disk(key: _Key, text: str) -> OnDisk:
    node = lookup(key.holder, key.key)
    if node is None:
        return OnDisk(key.param, f"{key.file}:{line_of(key.holder)} {key.key}", None, key.default)
    written = text[node.start_mark.index:node.end_mark.index]
    loaded = yaml.safe_load(written) if isinstance(node, ScalarNode) else None
    number = isinstance(loaded, (int, float)) and not isinstance(loaded, bool)
    if key.param in DURATIONS:
        value = float(loaded) if number else go_seconds(loaded) if isinstance(loaded, str) else None
    else:
        value = loaded if number else None
    return OnDisk(key.param, f"{key.file}:{line_of(node)} {key.key}", written, value)


def _composed(files: FilebeatFiles) -> tuple[dict[Path, str], dict[Path, Node]]:
    documents = {path: read_document(path) for path in files.files()}
    return {path: text for path, (text, _) in documents.items()}, {path: root for path, (_, root) in documents.items()}


def on_disk(files: FilebeatFiles) -> list[OnDisk]:
    """Every tuned key as the files have it now, the first selected input's first."""
    texts, roots = _composed(files)
    return [_on_disk(key, texts[key.file]) for key in _keys(files, roots, PIPELINE_SPACE.params)]


def patch(files: FilebeatFiles, values: Mapping[str, Value], base: Mapping[str, Value] | None = None
          ) -> dict[Path, str]:
    """The new text of each file `values` change (files left as they are are not in the result): `values`
    rebased onto the files as they are now (agents/rebase.py), `base` the values the agent last wrote."""
    texts, roots = _composed(files)
    keys = _keys(files, roots, values)
    found = [_on_disk(key, texts[key.file]) for key in keys]
    written = None if base is None else {p: _as_read(p, base[p]) for p in values}
    rewrite = {id(d) for d in to_rewrite(found, {p: _as_read(p, v) for p, v in values.items()}, written)}
    # The keys to rewrite, by the mapping they are written in: one edit of a mapping adds its new keys in order.
    by_holder: dict[int, list[_Key]] = {}
    for key, disk in zip(keys, found):
        if id(disk) in rewrite:
            by_holder.setdefault(id(key.holder), []).append(key)
    edits: dict[Path, list[Edit]] = {}
    for same_holder in by_holder.values():
        first = same_holder[0]
        settings = {key.key: _value(key.param, values[key.param]) for key in same_holder}
        edits.setdefault(first.file, []).extend(edits_for(texts[first.file], first.holder, settings, str(first.file)))
    return {path: apply(texts[path], file_edits) for path, file_edits in edits.items() if file_edits}
