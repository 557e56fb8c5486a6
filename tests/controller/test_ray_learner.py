"""Learners on a Ray cluster: `--ray-address` joins a two-node cluster started on this machine (`ray start
--head`, then `ray start --address`), the pools' learner actors go round-robin to both nodes, and a pool
whose learner's node is stopped goes on deciding with a learner rebuilt elsewhere from its state directory."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest


# Run in a process of its own: the test session's own Ray (the `ray_session` fixture) is a local one.
JOINED = """
import json, sys
import ray
from controller.ray_learner import node_for, start_ray
from tests.controller.ray_cluster_driver import wait_for_nodes
from controller.tuning_run import LearnerSetup, tuning_learner
from models.policy import Policy
from models.presets import preset

start_ray(sys.argv[1])
wait_for_nodes(2)
"""

JOIN = JOINED + """
setup = LearnerSetup("random", Policy(), preset("defaults"), "filebeat-kafka")
learners = {pool: tuning_learner(setup, remote=True, node_id=node_for(i)) for i, pool in enumerate(("edge", "core"))}
print(json.dumps({"nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]),
                  "actors": {pool: learner.node_id() for pool, learner in learners.items()}}))
"""

# Two pools on the twin, each learner on a node of its own; after the test stops the worker node, both go on.
KILL = JOINED + """
from functools import partial
from pathlib import Path
from controller.daemon import Daemon
from controller.pools import relearn
from controller.state import StateStore
from controller.tuning_run import twin_pipeline
from models.twin import load
from replay.profiles import WorkloadSpec

daemons = {}
for i, pool in enumerate(("edge", "core")):
    setup = LearnerSetup("random", Policy(), preset("defaults"), "filebeat-kafka")
    learner = tuning_learner(setup, remote=True, node_id=node_for(i))
    twin = twin_pipeline(preset("defaults"), load("paper-2vcpu"), WorkloadSpec("steady", 450.0, seed=1), 8, 30.0)
    daemon = Daemon(twin, learner, Policy(), window_s=30.0, store=StateStore(Path(sys.argv[2]) / pool), name=pool)
    learner.on_restore = partial(relearn, daemon)
    daemon.warm_up()
    for _ in range(2):
        daemon.step()
    daemons[pool] = daemon
head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
me = ray.get_runtime_context().get_node_id()
print(json.dumps({"head": head, "driver": me, "actors": {p: d.learner.node_id() for p, d in daemons.items()}}),
      flush=True)
sys.stdin.readline()  # the test stops the worker node meanwhile
for daemon in daemons.values():
    for _ in range(2):
        daemon.step()
print(json.dumps({"actors": {p: d.learner.node_id() for p, d in daemons.items()},
                  "decisions": {p: len(d.store.decisions()) for p, d in daemons.items()},
                  "told": {p: d.told for p, d in daemons.items()},
                  "stored": {p: len(d.store.observations()) for p, d in daemons.items()}}), flush=True)
"""


@pytest.mark.slow
def test_pool_learners_spread_over_a_two_node_ray_cluster(two_node_cluster):
    address, env, _ = two_node_cluster
    joined = subprocess.run([sys.executable, "-c", JOIN, address], env=env, capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).parents[2])
    assert joined.returncode == 0, joined.stderr[-3000:]
    placed = json.loads(joined.stdout.strip().splitlines()[-1])
    assert len(placed["nodes"]) == 2
    assert sorted(placed["actors"].values()) == placed["nodes"]  # one pool's learner on each Ray node


@pytest.mark.slow
def test_a_pool_whose_learners_node_stops_goes_on_with_a_learner_rebuilt_from_its_state(two_node_cluster, tmp_path):
    address, env, worker = two_node_cluster
    script = subprocess.Popen([sys.executable, "-c", KILL, address, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        before = json.loads(script.stdout.readline() or "null")
        assert before is not None, script.stderr.read()[-3000:]
        assert before["driver"] == before["head"]  # else stopping the worker would take the driver with it
        moved = [pool for pool, node in before["actors"].items() if node != before["head"]]
        assert len(moved) == 1
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
        script.stdin.write("stopped\n")
        script.stdin.flush()
        out, err = script.communicate(timeout=300)
    finally:
        if script.poll() is None:
            script.kill()
    assert script.returncode == 0, err[-3000:]
    after = json.loads(out.strip().splitlines()[-1])
    assert set(after["actors"].values()) == {before["head"]}  # the lost learner was built again on the head
    assert after["decisions"] == {"edge": 4, "core": 4}  # two windows each before and after: none lost
    # the rebuilt learner was taught every stored window again, and nothing twice
    assert after["told"][moved[0]] == after["stored"][moved[0]] >= 3


def test_rays_token_is_readable_by_its_owner_only(ray_session):
    from controller.ray_learner import RAY_TOKEN

    assert RAY_TOKEN.exists() and stat.S_IMODE(RAY_TOKEN.stat().st_mode) == 0o600
