"""Fixtures for the agent tests: an agent served in a thread, an agent.yaml for a real Filebeat, a Kafka
topic of a test's own, a component whose range lets through what only its own check refuses, and a private
dockerd with a Filebeat image."""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import secrets
import tarfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import uvicorn
from confluent_kafka.admin import AdminClient, NewTopic

from agents.client import AgentClient
from agents.component import ManagedComponent
from agents.config import AgentConfig
from agents.filebeat.render import FilebeatLayout, input_selector, write_first_config
from agents.runtimes import ProcessRuntime
from agents.service import build_components, create_app
from tests.agents.docker_engine import DockerEngine, import_image, start_engine
from models.space import PIPELINE_SPACE
from tests.conftest import free_ports

TOKEN = "test-token-0123456789"

# Runs the component, except when a test left a marker beside it: `crash-next` makes the next start
# exit at once (a component that dies after a restart), `slow-next` makes it hang before starting
# (a change still under way). Each marker is used once.
WRAPPER = """\
here=$(dirname "$0")
if [ -e "$here/crash-next" ]; then rm "$here/crash-next"; echo "crashing as asked" >&2; exit 3; fi
if [ -e "$here/slow-next" ]; then rm "$here/slow-next"; sleep 120; fi
exec "$@"
"""


class ServedAgent:
    """An agent served by uvicorn on loopback in a thread of this process, and a client of it."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.components = build_components(config)
        app = create_app(config, TOKEN, self.components)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=config.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{config.port}"
        self.client = AgentClient(self.url, TOKEN)
        deadline = time.monotonic() + 60
        while not self.server.started:  # until it serves, failing at once if it cannot (no silent carry-on)
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"the agent did not serve on {self.url}")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop serving, then stop the processes the agent started (they outlive an agent otherwise)."""
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)
        for component in self.components.values():
            if isinstance(component.runtime, ProcessRuntime):
                component.runtime.stop()


@contextmanager
def own_topic(bootstrap: str, partitions: int = 1) -> Iterator[str]:
    """A topic of the test's own on the session's broker, deleted after the test."""
    name = f"agent-test-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


@pytest.fixture
def kafka_topic(testbed) -> Iterator[str]:
    """A one-partition topic of the test's own."""
    with own_topic(testbed.bootstrap) as name:
        yield name


def wider_range(agent: ServedAgent, component: str, param: str, high: float) -> ManagedComponent:
    """The agent's component, on the same runtime and store, with `param` allowed up to `high`: above what
    the component itself accepts, so that only the component's own check can stop such a value."""
    managed = agent.components[component]
    adapter = copy.copy(managed.adapter)
    adapter.params = tuple(dataclasses.replace(p, high=high) if p.name == param else p for p in adapter.params)
    widened = ManagedComponent(adapter, managed.runtime, managed.store, {}, settle_s=0.5)
    widened.start()  # adopts the running component on the version in force
    return widened


def write_wrapper(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "run.sh"
    wrapper.write_text(WRAPPER)
    return wrapper


def filebeat_agent_config(tmp_path: Path, binary: Path, runtime: dict | None = None, *, bootstrap: str | None = None,
                          topic: str = "nginx-access", **changes: object) -> AgentConfig:
    """An agent managing one Filebeat, on a first config written as the testbed writes its own; its output
    points at `bootstrap`, by default a closed port (health needs only its HTTP stats)."""
    config_dir = tmp_path / "filebeat"
    wrapper = write_wrapper(config_dir)
    http_port, kafka_port, agent_port = free_ports(3)
    layout = FilebeatLayout((tmp_path / "logs" / "access.log",), "filestream", False,
                            (bootstrap or f"127.0.0.1:{kafka_port}",), topic, http_port, config_dir)
    main = write_first_config(layout, PIPELINE_SPACE.defaults())
    argv = ["/bin/sh", str(wrapper), str(binary), "-c", str(main), "--path.home", str(config_dir)]
    raw = {
        "state_dir": str(tmp_path / "state"), "port": agent_port, "health_timeout_s": 20, "settle_s": 1.0, "supervise_interval_s": 0.5,
        "components": [{
            "name": "filebeat", "kind": "filebeat", "binary": str(binary), "config": str(main),
            "inputs": [input_selector(layout)], "http_port": http_port,
            "params": {"filebeat.backoff": 0.01, "filebeat.max_backoff": 0.05},
            "runtime": runtime or {"kind": "process", "argv": argv, "stop_timeout_s": 10},
        }],
    } | changes
    return AgentConfig.model_validate(raw)


_IMAGE_FILES = {"/bin/busybox": "/bin/busybox", "/lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2"}


def filebeat_rootfs(binary: Path) -> bytes:
    """A root filesystem tarball: static busybox (sh, rm, sleep), Filebeat and the libc it links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for target, source in {**_IMAGE_FILES, "/usr/share/filebeat/filebeat": str(binary)}.items():
            tar.add(os.path.realpath(source), arcname=target.lstrip("/"))
        for applet in ("sh", "rm", "sleep", "dirname"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for directory in ("tmp", "etc"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    """A dockerd of our own (installed from Debian's docker.io when missing), stopped after its module:
    Filebeat processes started on the host while it ran were seen stuck in start-up reading cgroups."""
    engine = start_engine(tmp_path_factory.mktemp("dockerd"))
    try:
        yield engine
    finally:
        client = engine.client()
        for container in client.containers.list(all=True):
            container.remove(force=True)
        client.close()
        engine.stop()


@pytest.fixture(scope="module")
def filebeat_image(docker_engine: DockerEngine, installed, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image made by `docker import` holding busybox and the cached Filebeat binary."""
    tarball = tmp_path_factory.mktemp("image") / "rootfs.tar"
    tarball.write_bytes(filebeat_rootfs(installed.filebeat))
    client = docker_engine.client()
    try:
        import_image(client, tarball, "pipetune-filebeat:test")
    finally:
        client.close()
    tarball.unlink()
    return "pipetune-filebeat:test"
