"""The testbed's probe process (`python -m agents.probe`), wired to the pipeline's ports and paths; the
node agent runs it and renders its consumer settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agents.kafka.client import FILE as CONSUMER_PROPERTIES
from agents.probe.consumer import REPLAY_EVENT_TIME
from models.event_time import COMBINED_TIME_REGEX, EventTimeSpec
from replay.events import STAMPED_FORMATS
from testbed.filebeat_layout import filebeat_pid_file
from testbed.pipeline import PipelineSpec
from testbed.processes import Service, pid_file


def probe_config_dir(spec: PipelineSpec) -> Path:
    """Where the agent renders the probe's consumer.properties."""
    return spec.resolved_run_dir() / "probe"


def probe_pid_file(spec: PipelineSpec) -> Path:
    """Where the first node's agent, which runs the probe, records the probe it started."""
    return spec.node_layouts()[0].home / "agent" / "state" / "probe" / "run" / "probe.pid.json"


def clock_offsets_file(spec: PipelineSpec) -> Path:
    """The per-node clock offsets the probe applies (written by whoever estimates them)."""
    return spec.resolved_run_dir() / "probe" / "clock-offsets.json"


def event_time_spec(log_format: str) -> EventTimeSpec:
    """Where the write time of the testbed's log lines is, by the replay's format."""
    if log_format == "combined":
        return EventTimeSpec("time_local", regex=COMBINED_TIME_REGEX)
    if log_format == "nginx-json":
        return EventTimeSpec("epoch_s", field="msec")
    return REPLAY_EVENT_TIME


def event_time_arguments(log_format: str) -> tuple[str, ...]:
    """The probe's flags for `event_time_spec`."""
    spec = event_time_spec(log_format)
    where = ("--event-time-field", spec.field) if spec.field else ("--event-time-regex", str(spec.regex))
    # pipetune's own events: the ledger accounts for every request_id, so every event is read.
    every = ("--sample-above-eps", "0") if log_format in STAMPED_FORMATS else ()
    return (*where, "--event-time-format", spec.format, *every)


def probe_service(spec: PipelineSpec) -> Service:
    """The probe as the first node's agent runs it: consuming with the agent's consumer.properties, exporting
    Filebeat's and Prometheus's CPU time (the agents export the logs' appended events and Filebeat's stats)."""
    run = spec.resolved_run_dir()
    # the brokers' CPU comes from their JMX exporters (`broker-<id>`), as on an operator's cluster
    pid_files = {spec.node_process(node, "filebeat"): filebeat_pid_file(spec, node) for node in spec.node_layouts()}
    pid_files["prometheus"] = pid_file(run, "prometheus")
    cpu_of = [arg for name, path in pid_files.items() for arg in ("--cpu-of", f"{name}={path}")]
    argv = (sys.executable, "-m", "agents.probe", "--bootstrap", spec.bootstrap, "--topic", spec.probe.topic,
            "--group-id", spec.probe.group_id, "--metrics-port", str(spec.probe.metrics_port),
            "--manifests", str(run / "manifests"), "--reports", str(run / "reports"),
            "--late-after-s", str(spec.probe.late_after_s),
            "--consumer-properties", str(probe_config_dir(spec) / CONSUMER_PROPERTIES),
            *event_time_arguments(spec.log.format), "--clock-offsets", str(clock_offsets_file(spec)), *cpu_of)
    return Service("probe", argv, run, pid_path=probe_pid_file(spec))


def checkout_env() -> dict[str, str]:
    """The environment, with this checkout importable."""
    # The agent (and the probe it starts) must import this checkout even when pipetune is not installed.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{root}:{path}" if path else root}
