"""Learners on a Ray cluster: `--ray-address` joins a two-node cluster started on this machine (`ray start
--head`, then `ray start --address`), and the pools' learner actors go round-robin to both nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import free_ports

# Run in a process of its own: the test session's own Ray (the `ray_session` fixture) is a local one.
JOIN = """
import json, sys, time
import ray
from controller.ray_learner import node_for, start_ray
from controller.tuning_run import LearnerSetup, tuning_learner
from models.policy import Policy
from models.presets import preset

start_ray(sys.argv[1])
deadline = time.monotonic() + 120
while sum(n["Alive"] for n in ray.nodes()) < 2:
    if time.monotonic() > deadline:
        sys.exit("the second Ray node did not join within 120 s")
    time.sleep(0.2)
setup = LearnerSetup("random", Policy(), preset("defaults"), "filebeat-kafka")
learners = {pool: tuning_learner(setup, remote=True, node_id=node_for(i)) for i, pool in enumerate(("edge", "core"))}
print(json.dumps({"nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]),
                  "actors": {pool: learner.node_id() for pool, learner in learners.items()}}))
"""


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
        yield f"127.0.0.1:{port}", env
    finally:
        for node in reversed(nodes):
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=120)


@pytest.mark.slow
def test_pool_learners_spread_over_a_two_node_ray_cluster(two_node_cluster):
    address, env = two_node_cluster
    joined = subprocess.run([sys.executable, "-c", JOIN, address], env=env, capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).parents[2])
    assert joined.returncode == 0, joined.stderr[-3000:]
    placed = json.loads(joined.stdout.strip().splitlines()[-1])
    assert len(placed["nodes"]) == 2
    assert sorted(placed["actors"].values()) == placed["nodes"]  # one pool's learner on each Ray node
