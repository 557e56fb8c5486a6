"""The learners' side of tests/controller/test_ray_cluster.py, in a process of its own (a process joins one
Ray cluster, and the test session runs its own local Ray).

    python -m tests.controller.ray_cluster_driver ADDRESS

Prints one `RESULT {json}` line per stage on stdout (Ray may print lines of its own): the node each pool's learner actor and each scoring task ran
on; then, after a line on stdin (the test has killed a node), what each learner's next suggestion did.
"""

from __future__ import annotations

import json
import sys
import time

import ray

from controller.pipelines import TwinPipeline
from controller.ray_learner import RemoteLearner, node_for, ray_map, start_ray
from controller.state import Told
from models.learning import Context, TunedCube, tuned_names
from models.policy import Policy
from models.presets import preset
from models.twin import load
from models.verdict import judge
from replay.profiles import Profile, WorkloadSpec, build_schedule

POOLS = 4


def _node_of_task(_chunk: int) -> str:
    return ray.get_runtime_context().get_node_id()


def _history(seed: int) -> list[Told]:
    """Three windows of a twin on the defaults, as a pool's state directory would give them back."""
    start = preset("defaults")
    twin = TwinPipeline(start, build_schedule(WorkloadSpec(Profile.steady, 300, 200, seed=seed)).schedule.times_s,
                        load("paper-2vcpu"), seed=seed)
    told, previous = [], None
    for _ in range(3):
        observation = twin.observe(30)
        told.append((start, Context(observation.offered_eps), observation, judge(observation, Policy(), start, previous)))
        previous = observation
    return told


def wait_for_nodes(count: int, timeout_s: float = 120.0) -> None:
    """Until the cluster has `count` alive nodes: `ray start --address` returns before the node has joined,
    and on a busy machine placing actors before it has puts them all on the head."""
    deadline = time.monotonic() + timeout_s
    while sum(n["Alive"] for n in ray.nodes()) < count:
        if time.monotonic() > deadline:
            sys.exit(f"the cluster did not have {count} alive nodes within {timeout_s:.0f} s")
        time.sleep(0.2)


def main() -> None:
    start_ray(sys.argv[1])
    wait_for_nodes(2)
    policy, start = Policy(), preset("defaults")
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    histories = [_history(seed) for seed in range(POOLS)]
    learners, restored = [], [0] * POOLS
    for seed, history in enumerate(histories):
        learner = RemoteLearner("pipetune", cube, start, "paper", seed, node_id=node_for(seed))

        def again(learner: RemoteLearner = learner, history: list[Told] = history, seed: int = seed) -> None:
            for told in history:  # what a pool's daemon does from its state directory (controller.pools.relearn)
                learner.tell(*told)
            restored[seed] = len(history)
        learner.on_restore = again
        for told in history:
            learner.tell(*told)
        learners.append(learner)
    placed = [learner.node_id() for learner in learners]
    tasks = ray_map(_node_of_task, range(8))
    print("RESULT", json.dumps({"learners": placed, "tasks": tasks}), flush=True)
    sys.stdin.readline()  # the test kills a Ray node now
    suggested = [learner.suggest(Context(300.0)).config is not None for learner in learners]
    print("RESULT", json.dumps({"suggested": suggested, "learners": [learner.node_id() for learner in learners],
                      "restored": restored}), flush=True)


if __name__ == "__main__":
    main()
