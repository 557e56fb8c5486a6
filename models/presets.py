"""Named configurations the product knows: component defaults, the paper's scenarios, Elastic's presets.

A preset is a set of changes from the component defaults (`PIPELINE_SPACE.defaults()`); parameters
it does not name keep their defaults. Paper scenarios follow Table 4 and Table 10 of
`shared/reference/paper-summary.md`; a component's vendor's presets come with its description
(`models.components`: Elastic's Filebeat output presets balanced, throughput, scale, latency).
"""

from __future__ import annotations

from typing import Mapping

from models.components import COMPONENTS
from models.space import PIPELINE_SPACE, Config, SearchSpace, Value

# The paper's sink is a Spark Streaming job whose consumption delay "is set by its batch period"
# (Section III.1); the period is not given. Every paper scenario runs it with a 1 s trigger, the
# canonical DStream batch duration, so the scenarios differ only in what Table 4 changes.
_PAPER_SINK: dict[str, Value] = {"spark.trigger.interval": 1.0}
_HYBRID: dict[str, Value] = {
    **_PAPER_SINK,
    "filebeat.scan_frequency": 0.01,
    "filebeat.close_inactive": 60.0,
    "filebeat.output.bulk_max_size": 50,
    "logstash.pipeline.batch.size": 1,
    "logstash.pipeline.batch.delay": 1.0,
    "logstash.output.kafka.linger_ms": 0.0,
}
_MICRO_BATCHING: dict[str, Value] = {
    **_PAPER_SINK,
    "logstash.pipeline.batch.size": 1,
    "logstash.pipeline.batch.delay": 1.0,
    "logstash.output.kafka.linger_ms": 5.0,
}

PRESETS: dict[str, Mapping[str, Value]] = {
    "defaults": {},
    # The paper's five scenarios (Table 4). Zero-Wait also switches the log to single-line JSON,
    # which is a property of the workload, not of the pipeline config. I/O Control, Hybrid and the OVATs set
    # scan_frequency alone and keep the default backoffs, as the study ran them: that breaks Filebeat's
    # backoff <= max_backoff <= scan_frequency (`models.components.filebeat`), which a node agent refuses.
    "baseline": _PAPER_SINK,
    "zero-wait": {
        **_PAPER_SINK,
        "filebeat.queue.mem.flush.min_events": 1,
        "filebeat.queue.mem.flush.timeout": 0.0,
        "filebeat.output.bulk_max_size": 1,
        "filebeat.output.pipelining": 0,
    },
    "micro-batching": _MICRO_BATCHING,
    "io-control": {**_MICRO_BATCHING, "filebeat.scan_frequency": 0.01, "filebeat.output.bulk_max_size": 50,
                   "filebeat.close_inactive": 60.0},
    "hybrid": _HYBRID,
    # One change from Hybrid (Table 10).
    "ovat-1": {**_HYBRID, "filebeat.scan_frequency": 1.0},
    "ovat-2": {**_HYBRID, "filebeat.output.bulk_max_size": 2048},
    "ovat-3": {**_HYBRID, "logstash.output.kafka.linger_ms": 5.0},
    # Each component's vendor's, Elastic's Filebeat output presets among them.
    **{name: changes for component in COMPONENTS for name, changes in component.presets.items()},
}


def preset(name: str, space: SearchSpace = PIPELINE_SPACE, base: Mapping[str, Value] | None = None) -> Config:
    """The named preset as a full `Config`; raises `KeyError` listing the known names."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return space.config(PRESETS[name], base=base)


def preset_as_taken(name: str, changes: Mapping[str, Value] | None = None) -> tuple[Config, dict[str, tuple[Value, Value]]]:
    """Preset `name` with `changes` on top, as the components take it: where it breaks a component's order rule
    with values neither sets (the paper's Hybrid: scan_frequency 10 ms beside the default max_backoff 10 s, which
    an agent refuses), those are lowered into order, the nearest config the agents take; with the values moved,
    `{param: (the preset's, the one taken)}` (empty for a preset in order)."""
    written = PIPELINE_SPACE.config(dict(changes or {}), base=preset(name))
    kept = {*PRESETS[name], *(changes or {})}
    movable = [p.name for p in PIPELINE_SPACE if p.name not in kept and p.low is not None]
    config = PIPELINE_SPACE.in_order(written, movable, {n: (PIPELINE_SPACE[n].low, PIPELINE_SPACE[n].high)
                                                        for n in movable})
    return config, written.diff(config)
