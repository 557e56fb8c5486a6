"""Expensive fixtures shared by the whole test session: the installed components and one running testbed."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from testbed import bed
from testbed.install import Installed, install_all
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline


def free_ports(count: int) -> list[int]:
    """Loopback ports nobody listens on right now (held open together, so they are distinct)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _write_pipeline(directory: Path, name: str, **changes: object) -> Path:
    """A copy of the default pipeline file with fresh ports, its run dir inside `directory`."""
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text())
    kafka, controller, filebeat, prometheus, probe = free_ports(5)
    raw["name"] = name
    raw["run_dir"] = str(directory / "run")
    raw["kafka"] |= {"port": kafka, "controller_port": controller}
    raw["filebeat"]["http_port"] = filebeat
    raw["prometheus"]["port"] = prometheus
    raw["probe"]["metrics_port"] = probe
    raw |= changes
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="session")
def make_pipeline():
    """Writes a pipeline file like the default one, with free ports and its run dir in a given directory."""
    return _write_pipeline


@pytest.fixture(scope="session")
def installed() -> Installed:
    """Kafka, Filebeat and Prometheus, installed once (cached across sessions under ~/.cache/pipetune)."""
    return install_all()


@pytest.fixture(scope="session")
def testbed(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineSpec]:
    """One running testbed (a single Kafka broker) for the session; a low-latency config keeps tests short."""
    directory = tmp_path_factory.mktemp("testbed")
    spec = load_pipeline(_write_pipeline(directory, "pytest", config={"preset": "defaults", "set": {
        "filebeat.backoff": 0.01, "filebeat.max_backoff": 0.05, "filebeat.scan_frequency": 0.5,
        "filebeat.queue.mem.flush.min_events": 0, "filebeat.queue.mem.flush.timeout": 0.0,
        "kafka.consumer.fetch.max.wait.ms": 50}}))
    bed.up(spec)
    try:
        yield spec
    finally:
        bed.down(spec)
