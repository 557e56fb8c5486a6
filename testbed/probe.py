"""The testbed's probe process (`python -m agents.probe`), wired to the pipeline's ports and paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from models.space import Config
from testbed.filebeat import filebeat_layout
from testbed.pipeline import PipelineSpec
from testbed.processes import Service, pid_file


def probe_service(spec: PipelineSpec, config: Config) -> Service:
    """The probe, consuming with the config's `kafka.consumer.*` settings and re-exporting Filebeat's
    stats and the other components' CPU time."""
    run = spec.resolved_run_dir()
    cpu_of = [arg for name in ("kafka", "filebeat", "prometheus")
              for arg in ("--cpu-of", f"{name}={pid_file(run, name)}")]
    argv = (sys.executable, "-m", "agents.probe", "--bootstrap", spec.bootstrap, "--topic", spec.probe.topic,
            "--group-id", spec.probe.group_id, "--metrics-port", str(spec.probe.metrics_port),
            "--manifests", str(run / "manifests"), "--reports", str(run / "reports"),
            "--late-after-s", str(spec.probe.late_after_s),
            "--fetch-min-bytes", str(config["kafka.consumer.fetch.min.bytes"]),
            "--fetch-max-wait-ms", str(config["kafka.consumer.fetch.max.wait.ms"]),
            "--filebeat-stats-url", f"http://127.0.0.1:{spec.filebeat.http_port}/stats",
            "--filebeat-data", str(filebeat_layout(spec).home_dir / "data"), "--log-path", str(spec.log_path()),
            *cpu_of)
    return Service("probe", argv, run, env=_probe_env())


def _probe_env() -> dict[str, str]:
    # The probe must import this checkout even when pipetune is not installed into the interpreter.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{root}:{path}" if path else root}
