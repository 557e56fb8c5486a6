"""A first Filebeat 7.17 config for a Filebeat that has none yet (the testbed's): a pure function of the
pipeline's shape and a `Config`. The agent never renders: it patches whatever config Filebeat has,
this one included (`write_first_config`, then agent.yaml points the adapter at it).

Inputs are rendered into their own file, loaded through `filebeat.config.inputs` with reload
enabled, as many operators' configs have it; the queue and the output live in filebeat.yml. The
agent restarts Filebeat for every change all the same (agents/filebeat/adapter.py says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from agents.adapter import write_files
from models.space import Config

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


def go_duration(seconds: float) -> str:
    """A float of seconds in Go's duration syntax (`10ms`, `1.5s`), as Filebeat parses durations."""
    if seconds == 0:
        return "0s"
    if seconds >= 1 and float(seconds).is_integer():
        return f"{int(seconds)}s"
    millis = f"{seconds * 1000:.3f}".rstrip("0").rstrip(".")
    return f"{millis}ms"


def render_filebeat_inputs(layout: FilebeatLayout, config: Config) -> str:
    """The reloadable inputs file (a YAML list with one input over the replayed log)."""
    durations = {"scan_frequency", "backoff", "max_backoff", "close_inactive"}
    params = {name: config[f"filebeat.{name}"] for name in (*durations, "harvester_buffer_size")}
    settings = {name: go_duration(float(v)) if name in durations else int(v) for name, v in params.items()}
    entry: dict[str, object] = {"type": layout.input_type, "paths": [str(p) for p in layout.log_paths]}
    multiline = {"pattern": r"^\{", "negate": True, "match": "after",
                 "timeout": go_duration(float(config["filebeat.multiline.timeout"]))}
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
                      "flush.timeout": go_duration(float(config["filebeat.queue.mem.flush.timeout"]))},
        # output.kafka has no `pipelining`; that parameter only shapes the Logstash output.
        "output.kafka": {"hosts": list(layout.kafka_hosts), "topic": layout.topic, "version": "2.6.0",
                         "bulk_max_size": int(config["filebeat.output.bulk_max_size"]),
                         "worker": int(config["filebeat.output.worker"]), "required_acks": 1},
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
