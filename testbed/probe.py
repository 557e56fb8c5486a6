"""The testbed's probe process (`python -m agents.probe`), wired to the pipeline's ports and paths; the
node agent runs it and renders its consumer settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agents.kafka_client import FILE as CONSUMER_PROPERTIES
from testbed.filebeat_layout import filebeat_pid_file
from testbed.pipeline import PipelineSpec
from testbed.processes import Service, pid_file


def probe_config_dir(spec: PipelineSpec) -> Path:
    """Where the agent renders the probe's consumer.properties."""
    return spec.resolved_run_dir() / "probe"


def probe_pid_file(spec: PipelineSpec) -> Path:
    """Where the agent's process runtime records the probe it started."""
    return spec.resolved_run_dir() / "agent" / "state" / "probe" / "run" / "probe.pid.json"


def probe_service(spec: PipelineSpec) -> Service:
    """The probe as the agent runs it: consuming with the agent's consumer.properties, exporting the other
    components' CPU time (the agent exports the log's appended events and Filebeat's stats)."""
    run = spec.resolved_run_dir()
    pid_files = {"kafka": pid_file(run, "kafka"), "filebeat": filebeat_pid_file(spec),
                 "prometheus": pid_file(run, "prometheus")}
    cpu_of = [arg for name, path in pid_files.items() for arg in ("--cpu-of", f"{name}={path}")]
    argv = (sys.executable, "-m", "agents.probe", "--bootstrap", spec.bootstrap, "--topic", spec.probe.topic,
            "--group-id", spec.probe.group_id, "--metrics-port", str(spec.probe.metrics_port),
            "--manifests", str(run / "manifests"), "--reports", str(run / "reports"),
            "--late-after-s", str(spec.probe.late_after_s),
            "--consumer-properties", str(probe_config_dir(spec) / CONSUMER_PROPERTIES),
            *cpu_of)
    return Service("probe", argv, run, pid_path=probe_pid_file(spec))


def checkout_env() -> dict[str, str]:
    """The environment, with this checkout importable."""
    # The agent (and the probe it starts) must import this checkout even when pipetune is not installed.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{root}:{path}" if path else root}
