"""Expensive fixtures of the controller's tests: a two-node Ray cluster started as an operator would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import free_ports


def _ray_node(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`ray start ... --block`: the node's processes live as long as this one, which a signal ends with them (never
    `ray stop`, which would stop every Ray on the machine)."""
    ray = Path(sys.executable).parent / "ray"
    return subprocess.Popen([str(ray), "start", "--block", "--num-cpus=1", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def two_node_cluster(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    port = free_ports(1)[0]
    temp = Path(os.environ.get("RAY_TMPDIR", "/tmp/pipetune-ray")) / f"cluster-{port}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(temp)}
    head = _ray_node(["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}"], env)
    nodes = [head]
    try:
        nodes.append(_ray_node([f"--address=127.0.0.1:{port}"], env))
        yield f"127.0.0.1:{port}", env, nodes[1]
    finally:
        for node in reversed(nodes):
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=120)
