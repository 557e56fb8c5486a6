"""An operator's Logstash 7.17 pipeline, patched rather than regenerated.

`discover` finds the `pipelines.yml` entry of the selected `pipeline.id` and, among the config files its
`path.config` names (a file or a glob, as Logstash reads it), the kafka output with the selected `id`.
`patch` changes that entry's `pipeline.workers`, `pipeline.batch.size` and `pipeline.batch.delay`
(whole milliseconds, as logstash.yml documents it) and that output's producer settings, and nothing else.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from agents.logstash.conf import LogstashConfigError, patch_plugin, read_plugins
from agents.yaml_patch import YamlPatchError, apply, compose, edits_for, line_of, lookup
from models.space import Value

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


def patch(files: LogstashFiles, values: Mapping[str, Value]) -> dict[Path, str]:
    """The new text of each file `values` change (files left as they are are not in the result)."""
    changed: dict[Path, str] = {}
    settings = {PIPELINE_KEYS[p]: round(float(v)) if p.endswith("batch.delay") else v
                for p, v in values.items() if p in PIPELINE_KEYS}
    text = files.pipelines_yml.read_text()
    _, entry = _entry(text, files.pipelines_yml, files.pipeline_id)
    edits = edits_for(text, entry, settings, str(files.pipelines_yml))
    if edits:
        changed[files.pipelines_yml] = apply(text, edits)
    output = {p.removeprefix(OUTPUT_PREFIX): v for p, v in values.items() if p.startswith(OUTPUT_PREFIX)}
    conf = files.conf.read_text()
    patched = patch_plugin(conf, files.output_id, output, source=str(files.conf)) if output else conf
    if patched != conf:
        changed[files.conf] = patched
    return changed

