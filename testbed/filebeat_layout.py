"""The testbed's Filebeats: each node's layout on disk and the pid file of the process its agent runs."""

from __future__ import annotations

from pathlib import Path

from agents.filebeat.render import FilebeatLayout
from testbed.pipeline import NodeLayout, PipelineSpec


def filebeat_layout(spec: PipelineSpec, node: NodeLayout | None = None) -> FilebeatLayout:
    """Node `node`'s Filebeat (default: the first node's), publishing the node's name as its host.name; it
    reads the node's log, and the canaries' own file with `agent.canary_file`."""
    node = node or spec.node_layouts()[0]
    paths = (node.log_path, node.canary_path) if spec.agent.canary_file else (node.log_path,)
    return FilebeatLayout(paths, spec.filebeat.input, spec.log.format == "multiline-json",
                          tuple(spec.bootstrap.split(",")), spec.filebeat.topic, node.filebeat_http_port,
                          node.home / "filebeat", name=node.name)


def filebeat_pid_file(spec: PipelineSpec, node: NodeLayout | None = None) -> Path:
    """Where node `node`'s agent (default: the first node's) records the Filebeat it started."""
    node = node or spec.node_layouts()[0]
    return node.home / "agent" / "state" / "filebeat" / "run" / "filebeat.pid.json"
