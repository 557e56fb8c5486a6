"""The learner on Ray: an actor holds it and its observations; acquisition scoring fans out as tasks.

`start_ray` joins a cluster (`--ray-address`) or starts a quiet local one. `RemoteLearner` wraps the
actor in the plain `Learner` interface, so the daemon cannot tell it from an in-process learner;
each tuned pipeline (each pool of a deployment) gets an actor of its own, placed on the node it names
(`node_for`: the pools round-robin over the cluster's nodes), or wherever Ray likes when the node is gone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Iterable

import ray
from ray._private import ray_constants
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from models.learning import Context, Suggestion, TunedCube
from models.observation import Observation
from models.policy import Policy
from models.screen import TwinScreen
from models.space import Config
from models.strategies import build_learner
from models.verdict import Verdict


REBUILD_ATTEMPTS = 3  # times one call builds a lost actor again before it gives up
RAY_TOKEN = Path.home() / ".ray" / "auth_token"  # where Ray keeps its token authentication's token


def start_ray(address: str | None = None) -> None:
    """Connect to `address`, or start a local Ray without dashboard or log noise (once per process).

    A local Ray listens on loopback only. Ray binds its servers (GCS, raylet and object manager, workers, runtime
    env and dashboard agents, autoscaler metrics) to loopback exactly when its node IP is a loopback address, and
    on Linux it takes the machine's outward IP for the node IP, even when given `_node_ip_address="127.0.0.1"`.
    It keeps 127.0.0.1 where multi-node clusters are off (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read once, when
    `ray` is imported), so that constant is off while the local Ray starts. A joined cluster listens where its
    operator started it. Ray's own token authentication stays on (its token in ~/.ray/auth_token) against the
    machine's other users, who reach loopback too; Ray writes that token readable by every user, so it is made
    its owner's alone."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_TMPDIR", "/tmp/pipetune-ray")
    if address:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    else:
        clusters, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
        try:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR,
                     log_to_driver=False, configure_logging=True)
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = clusters
    if RAY_TOKEN.exists():
        RAY_TOKEN.chmod(0o600)


def _alive_nodes() -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def node_for(index: int) -> str:
    """The alive Ray node the `index`-th pool's learner goes to: round-robin over the nodes in a fixed order."""
    nodes = _alive_nodes()
    return nodes[index % len(nodes)]


@ray.remote
def _call(fn: Callable, chunk):
    return fn(chunk)


def ray_map(fn: Callable, chunks: Iterable) -> list:
    """`map` whose calls run as Ray tasks round-robin over the cluster's alive nodes (the function is shipped
    once). Each call is placed on its node, softly: Ray's SPREAD is best effort, and on a busy cluster it
    ran every call on one node; a call whose node is gone runs elsewhere."""
    fn_ref = ray.put(fn)
    nodes = _alive_nodes()
    return ray.get([_call.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=True))
                    .remote(fn_ref, chunk) for i, chunk in enumerate(chunks)])


@ray.remote
class LearnerActor:
    """Holds one learner and its history in its own process."""

    def __init__(self, strategy: str, cube: TunedCube, start: Config, topology: str, seed: int,
                 screen: TwinScreen | None) -> None:
        self.learner = build_learner(strategy, cube, start, topology=topology, seed=seed, screen=screen,
                                     parallel_map=ray_map)

    def suggest(self, context: Context) -> Suggestion:
        return self.learner.suggest(context)

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self.learner.tell(config, context, observation, verdict)

    def update_policy(self, policy: Policy) -> None:
        self.learner.update_policy(policy)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class RemoteLearner:
    """The `Learner` interface over a `LearnerActor`.

    An actor lost with its Ray node is built again (elsewhere: the node affinity is soft) and `on_restore`
    is called to teach it again (the pool's daemon tells it its state directory's observations); then the
    call that found it gone is made again, so the decision in progress is not lost.
    """

    def __init__(self, strategy: str, cube: TunedCube, start: Config, topology: str, seed: int = 0,
                 screen: TwinScreen | None = None, node_id: str | None = None) -> None:
        self._args = (strategy, cube, start, topology, seed, screen)
        self._node_id = node_id
        self.on_restore: Callable[[], None] | None = None
        self.actor = self._place()

    def _place(self):
        # soft: if that node is gone, Ray places the actor elsewhere rather than never
        placed = LearnerActor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(self._node_id, soft=True)) \
            if self._node_id else LearnerActor
        return placed.remote(*self._args)

    def _ask(self, method: str, *args: object):
        for attempt in range(REBUILD_ATTEMPTS + 1):
            try:
                return ray.get(getattr(self.actor, method).remote(*args))
            except RayActorError:
                if attempt == REBUILD_ATTEMPTS:
                    raise
                # A node that crashed is known dead only after Ray misses its heartbeats: until then an actor
                # built again can land on it and die too. Its node is not asked for again.
                self._node_id = None
                self.actor = self._place()
                if self.on_restore is not None:
                    self.on_restore()

    def suggest(self, context: Context) -> Suggestion:
        return self._ask("suggest", context)

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self._ask("tell", config, context, observation, verdict)

    def update_policy(self, policy: Policy) -> None:
        self._ask("update_policy", policy)

    def node_id(self) -> str:
        """The Ray node the actor runs on."""
        return self._ask("node_id")
