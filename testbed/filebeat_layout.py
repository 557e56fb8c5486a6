"""The testbed's Filebeat: its layout on disk and the pid file of the process the agent runs."""

from __future__ import annotations

from pathlib import Path

from agents.filebeat_render import FilebeatLayout
from testbed.pipeline import PipelineSpec


def filebeat_layout(spec: PipelineSpec) -> FilebeatLayout:
    return FilebeatLayout((spec.log_path(),), spec.filebeat.input, spec.log.format == "multiline-json",
                          (spec.bootstrap,), spec.filebeat.topic, spec.filebeat.http_port,
                          spec.resolved_run_dir() / "filebeat")


def filebeat_pid_file(spec: PipelineSpec) -> Path:
    """Where the agent's process runtime records the Filebeat it started (the same JSON as the testbed's)."""
    return spec.resolved_run_dir() / "agent" / "state" / "filebeat" / "run" / "filebeat.pid.json"
