"""The testbed's Filebeat: its layout on disk, its rendered config files, its process."""

from __future__ import annotations

from pathlib import Path

from agents.filebeat import FilebeatLayout, render_filebeat_config, render_filebeat_inputs
from models.space import Config
from testbed.pipeline import PipelineSpec
from testbed.processes import Service


def filebeat_layout(spec: PipelineSpec) -> FilebeatLayout:
    return FilebeatLayout((spec.log_path(),), spec.filebeat.input, spec.log.format == "multiline-json",
                          (spec.bootstrap,), spec.filebeat.topic, spec.filebeat.http_port,
                          spec.resolved_run_dir() / "filebeat")


def write_filebeat_config(spec: PipelineSpec, config: Config) -> Path:
    """Render filebeat.yml and its reloadable inputs file; returns filebeat.yml's path."""
    layout = filebeat_layout(spec)
    inputs = layout.home_dir / "inputs.d"
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "replay.yml").write_text(render_filebeat_inputs(layout, config))
    main = layout.home_dir / "filebeat.yml"
    main.write_text(render_filebeat_config(layout, config))
    main.chmod(0o600)  # Filebeat refuses a config file others can write
    return main


def filebeat_service(spec: PipelineSpec, binary: Path, config: Config) -> Service:
    main = write_filebeat_config(spec, config)
    return Service("filebeat", (str(binary), "-c", str(main), "--path.home", str(main.parent)),
                   spec.resolved_run_dir())
