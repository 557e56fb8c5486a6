"""An operator's Logstash 7.17 pipeline, patched rather than regenerated.

`discover` finds the `pipelines.yml` entry of the selected `pipeline.id` and, among the config files its
`path.config` names (a file or a glob, as Logstash reads it), the kafka output with the selected `id`.
`patch` changes that entry's `pipeline.workers`, `pipeline.batch.size` and `pipeline.batch.delay`
(whole milliseconds, as logstash.yml documents it) and that output's producer settings, and nothing else.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from agents.logstash.conf import LogstashConfigError, find_plugin, patch_plugin, read_plugins
from agents.rebase import OnDisk, to_rewrite
from agents.yaml_patch import YamlPatchError, apply, compose, edits_for, line_of, lookup
from models.space import PIPELINE_SPACE, Value

PIPELINE_KEYS = {"logstash.pipeline.workers": "pipeline.workers", "logstash.pipeline.batch.size": "pipeline.batch.size",
                 "logstash.pipeline.batch.delay": "pipeline.batch.delay"}
OUTPUT_PREFIX = "logstash.output.kafka."  # then the kafka output's own setting name (linger_ms, ...)


@dataclass(frozen=True)
class LogstashFiles:
    """What the agent manages of an operator's Logstash: one pipeline entry and one kafka output in it."""

    pipelines_yml: Path
    pipeline_id: str
    entry_index: int
    conf: Path  # the config file holding the output
    output_id: str
    sources: tuple[Path, ...]  # every file of the pipeline's path.config, in the order Logstash reads them


def _entry(text: str, source: Path, pipeline_id: str) -> tuple[int, MappingNode]:
    try:
        root = compose(text, str(source))
    except YamlPatchError as err:
        raise LogstashConfigError(str(err)) from None
    if not isinstance(root, SequenceNode):
        raise LogstashConfigError(f"{source}:{line_of(root)}: expected a list of pipelines")
    ids = []
    for i, entry in enumerate(root.value):
        found = lookup(entry, "pipeline.id") if isinstance(entry, MappingNode) else None
        if isinstance(found, ScalarNode):
            if found.value == pipeline_id:
                return i, entry
            ids.append(f"{found.value!r} (line {line_of(entry)})")
    raise LogstashConfigError(f"{source}: no pipeline.id {pipeline_id!r}; found {', '.join(ids) or 'none'}")


def discover(pipelines_yml: Path, pipeline_id: str, output_id: str) -> LogstashFiles:
    """The pipeline entry and the file of its kafka output `output_id`; errors name the file and line."""
    try:
        text = pipelines_yml.read_text()
    except OSError as err:
        raise LogstashConfigError(f"{pipelines_yml}: cannot read it ({err.strerror})") from None
    index, entry = _entry(text, pipelines_yml, pipeline_id)
    path_config = lookup(entry, "path.config")
    if not isinstance(path_config, ScalarNode):
        raise LogstashConfigError(f"{pipelines_yml}:{line_of(entry)}: pipeline {pipeline_id!r} has no path.config "
                                  "(a config.string pipeline cannot be patched)")
    pattern = Path(path_config.value)
    pattern = pattern if pattern.is_absolute() else pipelines_yml.parent / pattern
    holders = []
    sources = tuple(Path(name) for name in sorted(glob.glob(str(pattern))))
    for name in sources:
        plugins = read_plugins(name.read_text(), str(name))
        if any(p.section == "output" and p.name == "kafka" and p.id == output_id for p in plugins):
            holders.append(name)
    if len(holders) != 1:
        found = "none" if not holders else ", ".join(str(h) for h in holders)
        raise LogstashConfigError(f"{pattern}: expected one kafka output with id {output_id!r} in pipeline "
                                  f"{pipeline_id!r}, found {found}")
    return LogstashFiles(pipelines_yml, pipeline_id, index, holders[0], output_id, sources)


def _default(param: str) -> Value:
    """What Logstash reads where the files set none: for pipeline.workers the host's cores (logstash.yml)."""
    return (os.cpu_count() or PIPELINE_SPACE[param].default) if param == "logstash.pipeline.workers" \
        else PIPELINE_SPACE[param].default


def _read_as(param: str, written: object) -> Value | None:
    """`written` as the parameter's value; None when it is not one."""
    kind = PIPELINE_SPACE[param].kind
    try:
        return int(str(written)) if kind == "int" else float(str(written)) if kind == "float" else str(written)
    except ValueError:
        return None


def _as_read(param: str, value: Value) -> Value:
    """`value` as Logstash reads it once written (pipeline.batch.delay in whole milliseconds)."""
    return round(float(value)) if param.endswith("batch.delay") else value


def _setting(param: str, source: Path, line: int, name: str, written: str | None) -> OnDisk:
    value = _default(param) if written is None else _read_as(param, written)
    return OnDisk(param, f"{source}:{line} {name}", written, value)


def on_disk(files: LogstashFiles) -> list[OnDisk]:
    """The pipeline entry's tuned keys and the kafka output's tuned settings, as the files have them now."""
    found = []
    text = files.pipelines_yml.read_text()
    _, entry = _entry(text, files.pipelines_yml, files.pipeline_id)
    for param, key in PIPELINE_KEYS.items():
        node = lookup(entry, key)
        written = None if node is None else node.value if isinstance(node, ScalarNode) else "(not a single value)"
        found.append(_setting(param, files.pipelines_yml, line_of(node or entry), key, written))
    conf = files.conf.read_text()
    output = find_plugin(read_plugins(conf, str(files.conf)), files.output_id, section="output", name="kafka",
                         source=str(files.conf))
    for param in (p.name for p in PIPELINE_SPACE if p.name.startswith(OUTPUT_PREFIX)):
        name = param.removeprefix(OUTPUT_PREFIX)
        setting = output.settings.get(name)
        line = conf.count("\n", 0, setting.start) + 1 if setting else output.line
        found.append(_setting(param, files.conf, line, name, setting.value if setting else None))
    return found


def patch(files: LogstashFiles, values: Mapping[str, Value], base: Mapping[str, Value] | None = None
          ) -> dict[Path, str]:
    """The new text of each file `values` change (files left as they are are not in the result): `values`
    rebased onto the files as they are now (agents/rebase.py), `base` the values the agent last wrote."""
    found = [key for key in on_disk(files) if key.param in values]
    written = None if base is None else {p: _as_read(p, base[p]) for p in values}
    rewrite = {key.param for key in to_rewrite(found, {p: _as_read(p, v) for p, v in values.items()}, written)}
    changed: dict[Path, str] = {}
    settings = {PIPELINE_KEYS[p]: _as_read(p, values[p]) for p in PIPELINE_KEYS if p in rewrite}
    text = files.pipelines_yml.read_text()
    _, entry = _entry(text, files.pipelines_yml, files.pipeline_id)
    edits = edits_for(text, entry, settings, str(files.pipelines_yml))
    if edits:
        changed[files.pipelines_yml] = apply(text, edits)
    output = {p.removeprefix(OUTPUT_PREFIX): values[p] for p in rewrite if p.startswith(OUTPUT_PREFIX)}
    conf = files.conf.read_text()
    patched = patch_plugin(conf, files.output_id, output, source=str(files.conf)) if output else conf
    if patched != conf:
        changed[files.conf] = patched
    return changed
