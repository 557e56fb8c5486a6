"""Expensive fixtures shared by the whole test session: the installed components and one running testbed."""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from hypothesis import settings

from controller.kafka_lag import close_open_watches
from models.observation import Observation
from testbed import lifecycle
from testbed.install import Installed, install_all
from testbed.pipeline import DEFAULT_PIPELINE, PipelineSpec, load_pipeline

LOW_LATENCY = DEFAULT_PIPELINE.parent / "configs" / "low-latency.yaml"

# Property tests (hypothesis, schemathesis) draw the same examples on every run and keep no example
# database, so a red run is a change in the code, never an unlucky draw. HYPOTHESIS_PROFILE=explore
# draws fresh examples, to hunt for new counterexamples on purpose.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def free_ports(count: int) -> list[int]:
    """Loopback ports nobody listens on right now (held open together, so they are distinct)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _write_pipeline(directory: Path, name: str, **changes: object) -> Path:
    """A copy of the default pipeline file with fresh ports, its run dir inside `directory`, and `changes`."""
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text())
    kafka, controller, filebeat, prometheus, probe, agent = free_ports(6)
    raw["name"] = name
    raw["run_dir"] = str(directory / "run")
    raw["kafka"] |= {"port": kafka, "controller_port": controller}
    raw["filebeat"]["http_port"] = filebeat
    raw["prometheus"]["port"] = prometheus
    raw["probe"]["metrics_port"] = probe
    raw["agent"]["port"] = agent
    for key, value in changes.items():  # a section given as a mapping changes only the fields it names
        raw[key] = raw[key] | value if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def write_deployment(directory: Path, agent_url: str, **changes: object) -> Path:
    """A deployment file with one node, `edge-1`, at `agent_url` (its token beside it), and `changes`."""
    (directory / "edge-1.token").write_text("secret\n")
    doc = {"name": "shop", "nodes": [{"name": "edge-1", "agent_url": agent_url, "token_file": "edge-1.token"}],
           "kafka": {"bootstrap": "kafka-1:9092", "consumer_group": "shop-indexer"},
           "prometheus": {"url": "http://127.0.0.1:9"}} | changes
    path = directory / "deployment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class FixedTelemetry:
    """A stand-in `TelemetrySource` where no Prometheus runs: the same window every time, its stages named as
    the probe names them."""

    latency_stage = "e2e"

    def window(self, start: float, end: float) -> Observation:
        stages = {"filebeat_read": 0.01, "filebeat_publish": 0.02, "kafka_consume": 0.03}
        return Observation(end - start, 100.0, 100.0, 0.05, 0.06, 0.07, 0.05, stage_p95_s=stages)

    def close(self) -> None:
        pass


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray for the whole session (its temp dir under $RAY_TMPDIR when set)."""
    import ray

    from controller.ray_learner import start_ray

    start_ray()
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def make_pipeline():
    """Writes a pipeline file like the default one, with free ports and its run dir in a given directory."""
    return _write_pipeline


@pytest.fixture(scope="session")
def installed() -> Installed:
    """Kafka, Filebeat and Prometheus, installed once (cached across sessions under ~/.cache/pipetune)."""
    return install_all()


@pytest.fixture(scope="session")
def testbed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session testbed's pipeline file; its starting config is the low-latency one, to keep tests short."""
    config = yaml.safe_load(LOW_LATENCY.read_text())
    return _write_pipeline(tmp_path_factory.mktemp("testbed"), "pytest", config=config)


@pytest.fixture(scope="session")
def testbed(installed: Installed, testbed_file: Path) -> Iterator[PipelineSpec]:
    """One running testbed (a single Kafka broker) for the whole session."""
    spec = load_pipeline(testbed_file)
    lifecycle.up(spec)
    try:
        yield spec
    finally:
        close_open_watches()  # the live pipelines' lag watches, before the broker they sample stops
        lifecycle.down(spec)
