"""A first Filebeat 7.17 config for a Filebeat that has none yet (the testbed's): a pure function of the
pipeline's shape and a `Config`. The agent never renders: it patches whatever config Filebeat has,
this one included (`write_first_config`, then agent.yaml points the adapter at it).

Inputs are rendered into their own file, loaded through `filebeat.config.inputs` with reload
enabled, as many operators' configs have it; the queue and the output live in filebeat.yml. The
agent restarts Filebeat for every change all the same (agents/filebeat/adapter.py says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Literal

import yaml

from agents.adapter import write_files
from models.space import PIPELINE_SPACE, Config, Value

INPUTS_GLOB = "inputs.d/*.yml"
INPUTS_FILE = "inputs.d/replay.yml"
MAIN_FILE = "filebeat.yml"
INPUT_ID = "pipetune-replay"  # the filestream input's id, by which agent.yaml selects it

# Filebeat's `log` input names (canonical in models.space) and their `filestream` spellings.
_FILESTREAM_NAMES = {
    "scan_frequency": "prospector.scanner.check_interval",
    "backoff": "backoff.init",
    "max_backoff": "backoff.max",
    "close_inactive": "close.on_state_change.inactive",
    "harvester_buffer_size": "buffer_size",
}


@dataclass(frozen=True)
class FilebeatLayout:
    """Where this Filebeat reads, writes and listens: everything the config needs besides the `Config`."""

    log_paths: tuple[Path, ...]
    input_type: Literal["filestream", "log"]
    multiline: bool
    kafka_hosts: tuple[str, ...]
    topic: str
    http_port: int
    home_dir: Path
    name: str | None = None  # Filebeat's `name`, published as host.name (the probe's `node`); else the host's name
    # Wait for every in-sync replica (`required_acks: -1`) where the topic is replicated: with the leader's ack
    # alone, a leader that moves (the controller's preferred-leader rebalance) truncates what was acknowledged.
    acks_all: bool = False


_GO_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_BELOW_A_SECOND = (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))  # largest first


def go_seconds(text: str) -> float | None:
    """A Go duration (`10s`, `1m30s`, `250ms`) in seconds; None when `text` is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in parts)


def _significant(number: float, digits: int) -> str:
    """`number` to `digits` significant digits, without trailing zeros (`55.8`, `250`, `1.5`)."""
    text = f"{Decimal(repr(number)):.{digits}g}" if number else "0"
    return format(Decimal(text).normalize(), "f")


def _written(seconds: float, digits: int) -> str:
    """`seconds` as a person writes it: below a second in the largest unit it is at least 1 of (`250ms`,
    `31us`); from a second on in seconds, or in whole minutes or hours when it is some (`55.8s`, `90s`, `5m`)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        at = next((i for i, (_, size) in enumerate(_BELOW_A_SECOND) if seconds >= size), len(_BELOW_A_SECOND) - 1)
        number = Decimal(_significant(seconds / _BELOW_A_SECOND[at][1], digits))
        if number >= 1000:  # rounded up into the next unit: 999.6ms is 1s
            return _written(1.0, digits) if at == 0 else f"{number / 1000:f}{_BELOW_A_SECOND[at - 1][0]}"
        return f"{number:f}{_BELOW_A_SECOND[at][0]}"
    number = Decimal(_significant(seconds, digits))
    for unit, size in (("h", 3600), ("m", 60)):
        if number >= size and number % size == 0:
            return f"{number // size:f}{unit}"
    return f"{number:f}s"


def go_duration(seconds: float, low: float | None = None, high: float | None = None) -> str:
    """A float of seconds in Go's duration syntax, as Filebeat parses durations, written as a person would:
    at most 3 significant digits (`55.8s`, `250ms`, `31us`, `5m`). A rounding never leaves [`low`, `high`]
    (a parameter's range): the value is written with more digits instead."""
    for digits in range(3, 16):
        text = _written(seconds, digits)
        value = go_seconds(text)
        if (low is None or value >= low) and (high is None or value <= high):
            return text
    return _written(seconds, 17)


def duration_value(name: str, value: Value) -> str:
    """Duration parameter `name`'s value as a file gets it (`go_duration`), within the parameter's range."""
    param = PIPELINE_SPACE[name]
    return go_duration(float(value), param.low, param.high)


def render_filebeat_inputs(layout: FilebeatLayout, config: Config) -> str:
    """The reloadable inputs file (a YAML list with one input over the replayed log)."""
    durations = {"scan_frequency", "backoff", "max_backoff", "close_inactive"}
    params = {name: config[f"filebeat.{name}"] for name in (*durations, "harvester_buffer_size")}
    settings = {name: duration_value(f"filebeat.{name}", v) if name in durations else int(v)
                for name, v in params.items()}
    entry: dict[str, object] = {"type": layout.input_type, "paths": [str(p) for p in layout.log_paths]}
    multiline = {"pattern": r"^\{", "negate": True, "match": "after",
                 "timeout": duration_value("filebeat.multiline.timeout", config["filebeat.multiline.timeout"])}
    if layout.input_type == "log":
        entry |= settings | {"backoff_factor": int(config["filebeat.backoff_factor"])}
        if layout.multiline:
            entry |= {f"multiline.{k}": v for k, v in multiline.items()} | {"multiline.type": "pattern"}
    else:
        # filestream has no backoff_factor: its backoff always doubles.
        entry |= {"id": INPUT_ID} | {_FILESTREAM_NAMES[k]: v for k, v in settings.items()}
        if layout.multiline:
            entry["parsers"] = [{"multiline": {"type": "pattern", **multiline}}]
    return yaml.safe_dump([entry], sort_keys=False)


def render_filebeat_config(layout: FilebeatLayout, config: Config) -> str:
    """filebeat.yml: inputs in their own reloaded file, memory queue, Kafka output, HTTP stats on loopback."""
    flush_min = int(config["filebeat.queue.mem.flush.min_events"])
    document: dict[str, object] = {"name": layout.name} if layout.name else {}
    document |= {
        "filebeat.config.inputs": {"enabled": True, "path": str(layout.home_dir / INPUTS_GLOB),
                                   "reload.enabled": True, "reload.period": "1s"},
        "queue.mem": {"events": int(config["filebeat.queue.mem.events"]),
                      "flush.min_events": flush_min,
                      "flush.timeout": duration_value("filebeat.queue.mem.flush.timeout",
                                                      config["filebeat.queue.mem.flush.timeout"])},
        # output.kafka has no `pipelining`; that parameter only shapes the Logstash output.
        "output.kafka": {"hosts": list(layout.kafka_hosts), "topic": layout.topic, "version": "2.6.0",
                         "bulk_max_size": int(config["filebeat.output.bulk_max_size"]),
                         "worker": int(config["filebeat.output.worker"]), "required_acks": -1 if layout.acks_all else 1},
        "http": {"enabled": True, "host": "127.0.0.1", "port": layout.http_port},
        "path": {"home": str(layout.home_dir), "config": str(layout.home_dir),
                 "data": str(layout.home_dir / "data"), "logs": str(layout.home_dir / "logs")},
        "logging": {"level": "info", "to_files": True, "to_stderr": False, "metrics.enabled": False},
    }
    return yaml.safe_dump(document, sort_keys=False)


def input_selector(layout: FilebeatLayout) -> dict[str, str]:
    """How agent.yaml selects the rendered input: its id (filestream), or its log path (log)."""
    return {"id": INPUT_ID} if layout.input_type == "filestream" else {"path": str(layout.log_paths[0])}


def write_first_config(layout: FilebeatLayout, config: Config) -> Path:
    """Write filebeat.yml and its inputs file under the layout's home (0600); returns filebeat.yml's path."""
    main = layout.home_dir / MAIN_FILE
    write_files({main: render_filebeat_config(layout, config),
                 layout.home_dir / INPUTS_FILE: render_filebeat_inputs(layout, config)})
    return main
