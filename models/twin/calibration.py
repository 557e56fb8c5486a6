"""Cost coefficients of the twin: data, read from `models/calibrations/<name>.yaml` (or a parsed dict).

A calibration says how long each piece of work takes and how much CPU it burns on a given node; the
twin's code says when work happens. `topology` names the stages the node runs: `paper` is
file -> Filebeat -> Logstash -> Kafka -> Spark (the paper's pipeline); `filebeat-kafka` is
file -> Filebeat (output.kafka) -> Kafka -> a consumer governed by fetch.min.bytes / fetch.max.wait.ms
(this machine's testbed).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from models.components import TOPOLOGIES as COMPONENT_TOPOLOGIES

TOPOLOGIES = tuple(COMPONENT_TOPOLOGIES)  # models.components says what each one chains


@dataclass(frozen=True)
class Node:
    """The machine, and its harvested directory: the files there besides the live log, and what each costs
    Filebeat's every scan (the glob, a stat, a look-up of its state; `bench.scan_cost` measures it)."""

    cores: float
    background_cores: float
    slowdown_slice_s: float
    cpu_per_scanned_file_s: float
    # Rotated files the input's globs match that no longer grow (`access.log.1` ...): every scan stats them.
    idle_files: int = 0


@dataclass(frozen=True)
class Network:
    rtt_s: float
    bandwidth_bytes_per_s: float
    mss_bytes: int


@dataclass(frozen=True)
class Writer:
    cpu_per_event_s: float


@dataclass(frozen=True)
class Filebeat:
    cpu_per_event_s: float
    cpu_per_poll_s: float
    cpu_per_scan_s: float  # one scan of the input's paths matching only the live log (idle files: `Node`)
    cpu_per_batch_s: float
    cpu_per_event_out_s: float
    restart_s: float


@dataclass(frozen=True)
class Logstash:
    cpu_per_request_s: float
    cpu_decode_per_event_s: float
    request_latency_s: float
    cpu_per_event_s: float
    cpu_per_batch_s: float
    reload_s: float


@dataclass(frozen=True)
class Kafka:
    producer_cpu_per_request_s: float
    cpu_per_request_s: float
    cpu_per_record_s: float
    max_in_flight: int
    replication_s: float


@dataclass(frozen=True)
class Spark:
    batch_latency_s: float
    cpu_per_batch_s: float
    cpu_per_record_s: float
    poll_delay_s: float
    restart_s: float


@dataclass(frozen=True)
class Consumer:
    cpu_per_fetch_s: float
    cpu_per_record_s: float
    restart_s: float


@dataclass(frozen=True)
class Calibration:
    """Every cost coefficient the twin uses; see `models/calibrations/paper-2vcpu.yaml` for sources."""

    name: str
    description: str
    topology: str
    node: Node
    event_bytes: int
    network: Network
    jitter_cv: float
    writer: Writer
    filebeat: Filebeat
    logstash: Logstash
    kafka: Kafka
    spark: Spark
    consumer: Consumer

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Calibration":
        """Build from a parsed YAML mapping; raises `ValueError` naming a missing or unknown key."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                raise ValueError(f"calibration is missing {f.name!r}")
            raw = data[f.name]
            section = _SECTIONS.get(f.name)
            values[f.name] = _section(section, f.name, raw) if section else raw
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"calibration has unknown keys: {', '.join(sorted(unknown))}")
        if values["topology"] not in TOPOLOGIES:
            raise ValueError(f"topology {values['topology']!r} is not one of {', '.join(TOPOLOGIES)}")
        return cls(**values)

    def scaled(self, **changes: Any) -> "Calibration":
        """A copy with overrides: `jitter_cv=0.0`, or `section__field=value` (`logstash__reload_s=1.0`)."""
        top = {k: v for k, v in changes.items() if "__" not in k}
        for key, value in changes.items():
            if "__" in key:
                section, name = key.split("__", 1)
                top[section] = replace(top.get(section, getattr(self, section)), **{name: value})
        return replace(self, **top)


_SECTIONS = {"node": Node, "network": Network, "writer": Writer, "filebeat": Filebeat, "logstash": Logstash,
             "kafka": Kafka, "spark": Spark, "consumer": Consumer}


def _section(kind: type, name: str, raw: Mapping[str, Any]) -> Any:
    """A section's dataclass from its mapping: every field without a default must be there, none other."""
    required = {f.name for f in fields(kind) if f.default is MISSING}
    missing, unknown = required - set(raw), set(raw) - {f.name for f in fields(kind)}
    if missing or unknown:
        raise ValueError(f"calibration section {name!r}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    casts = {"float": float, "int": int}
    return kind(**{f.name: casts.get(str(f.type), lambda v: v)(raw[f.name]) for f in fields(kind) if f.name in raw})


def available() -> list[str]:
    """Names of the calibrations shipped as package data."""
    folder = resources.files("models") / "calibrations"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str) -> Calibration:
    """A shipped calibration by name (`paper-2vcpu`) or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = path.read_text()
    else:
        resource = resources.files("models") / "calibrations" / f"{name_or_path}.yaml"
        if not resource.is_file():
            raise KeyError(f"unknown calibration {name_or_path!r}; shipped: {', '.join(available())}")
        text = resource.read_text()
    return Calibration.from_dict(yaml.safe_load(text))
