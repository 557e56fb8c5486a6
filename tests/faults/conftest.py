"""Fixtures for the fault tests: small filesystems the test mounts itself (tmpfs with `size=`, unmounted when the
test ends; testbed.faults fills one up), and an agent over a stand-in Filebeat."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterator

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from agents.adapter import ConfigStore
from agents.component import ManagedComponent
from agents.config import AgentConfig
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import InputSelector
from agents.service import create_app
from cli.main import app
from testbed.faults import CannotMount, mount_small_disk, unmount
from tests.agents.conftest import kafka_topic  # noqa: F401  (a fixture: a Kafka topic of the test's own)
from tests.agents.test_component import OPERATOR, StandIn

AGENT_TOKEN = "fault-test-token"
AGENT_AUTH = {"Authorization": f"Bearer {AGENT_TOKEN}"}


class StandInAgent:
    """The agent's app managing one Filebeat whose process is a stand-in (tests/agents/test_component.py): the
    operator's filebeat.yml in `conf`, the agent's state in `state`, Filebeat's path.data `data`."""

    def __init__(self, conf: Path, state: Path, data: Path, binary_dir: Path) -> None:
        self.conf, self.state, self.data = conf, state, data
        conf.mkdir(parents=True, exist_ok=True)
        self.config = conf / "filebeat.yml"
        self.config.write_text(OPERATOR)
        binary = binary_dir / "filebeat"  # `filebeat test config` passes: Filebeat's own check is not the subject
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(0o755)
        self.runtime = StandIn(self.config)
        adapter = FilebeatAdapter(self.config, [InputSelector(id="access")], binary, runtime=self.runtime,
                                  data_dir=data)
        self.component = ManagedComponent(adapter, self.runtime, ConfigStore(state, "filebeat"), {}, settle_s=0)
        agent_config = AgentConfig.model_validate({
            "state_dir": str(state), "supervise_interval_s": 3600,
            "components": [{"name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(self.config),
                            "inputs": [{"id": "access"}]}]})
        self.app: FastAPI = create_app(agent_config, AGENT_TOKEN, {"filebeat": self.component})


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path, str], Path]]:
    """`small_disk(path, "2m")` mounts a tmpfs of that size at `path` (made if missing); every mount is undone after
    the test, the last one first. Skipped, saying why, where this user may not mount."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        try:
            mounted.append(mount_small_disk(path, size))
        except CannotMount as err:
            pytest.skip(str(err))
        return path

    yield mount
    for path in reversed(mounted):
        unmount(path)


def filebeat_log(home: Path) -> str:
    """What a Filebeat whose path.home is `home` logged (its path.logs: logs/ under it, as the agent tests write it)."""
    return "".join(p.read_text(errors="replace") for p in sorted((home / "logs").glob("filebeat*")))


GOLDEN = Path(__file__).parents[1] / "agents" / "golden" / "operator"


def agent_init(home: Path, out: Path) -> tuple[Path, Path]:
    """agent.yaml and its token as `pipetune agent init` writes them into `out`, for a copy of the golden operator
    files under `home` and a stand-in filebeat binary."""
    shutil.copytree(GOLDEN, home / "etc")
    binary = home / "etc" / "filebeat-bin"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    result = CliRunner().invoke(app, ["agent", "init", "--filebeat-config", str(home / "etc" / "filebeat.yml"),
                                      "--filebeat-binary", str(binary), "--input-id", "nginx-access",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "agent.yaml", out / "token"
