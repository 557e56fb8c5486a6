"""The learner on Ray: an actor holds it and its observations; acquisition scoring fans out as tasks.

`start_ray` joins a cluster (`--ray-address`) or starts a quiet local one. `RemoteLearner` wraps the
actor in the plain `Learner` interface, so the daemon cannot tell it from an in-process learner;
each tuned pipeline gets an actor of its own. Actors and scoring tasks are spread over the cluster's
nodes. An actor whose node dies is built again (on a node still up) and told its history again from
the pool's state directory (`restore`), so the decision that found it gone is still taken.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Iterable, TypeVar

import ray

from controller.state import Told
from models.learning import Context, Suggestion, TunedCube
from models.observation import Observation
from models.policy import Policy
from models.screen import TwinScreen
from models.space import Config
from models.strategies import build_learner
from models.verdict import Verdict

T = TypeVar("T")
REBUILD_ATTEMPTS = 3  # a dead actor is built again at most this many times for one call


def start_ray(address: str | None = None) -> None:
    """Connect to `address`, or start a local Ray without dashboard or log noise (once per process).

    Ray's servers listen on every interface of the machine whatever address they are given, so a local
    Ray keeps Ray's own token authentication (its token in ~/.ray/auth_token): without it anyone who can
    reach the machine could run code in the learners' processes."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_TMPDIR", "/tmp/pipetune-ray")
    if address:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                 configure_logging=True)


@ray.remote
def _call(fn: Callable, chunk):
    return fn(chunk)


def ray_map(fn: Callable, chunks: Iterable) -> list:
    """`map` whose calls run as Ray tasks (the function is shipped once)."""
    fn_ref = ray.put(fn)
    spread = _call.options(scheduling_strategy="SPREAD")
    return ray.get([spread.remote(fn_ref, chunk) for chunk in chunks])


@ray.remote(scheduling_strategy="SPREAD")
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
    """The `Learner` interface over a `LearnerActor`; `restore` gives the history to tell a rebuilt actor."""

    def __init__(self, strategy: str, cube: TunedCube, start: Config, topology: str, seed: int = 0,
                 screen: TwinScreen | None = None, restore: Callable[[], Iterable[Told]] | None = None) -> None:
        self._args = (strategy, cube, start, topology, seed, screen)
        self.restore = restore
        self.policy: Policy | None = None  # the last one given: a rebuilt actor follows it too
        self.restored = 0  # observations told to the last rebuilt actor
        self.actor = LearnerActor.remote(*self._args)

    def _ask(self, call: Callable[[], "ray.ObjectRef[T]"]) -> T:
        """`call`'s answer; an actor that died (its node with it) is built again and told its history first.
        A rebuilt actor can land on a node that is dying but not yet known dead: it is built again then too."""
        rebuilt = 0
        while True:
            try:
                if rebuilt:
                    self._rebuild()
                return ray.get(call())
            except ray.exceptions.RayActorError:
                if self.restore is None or rebuilt == REBUILD_ATTEMPTS:
                    raise
                rebuilt += 1

    def _rebuild(self) -> None:
        self.actor = LearnerActor.remote(*self._args)
        if self.policy is not None:
            ray.get(self.actor.update_policy.remote(self.policy))
        told = 0
        for told, observation in enumerate(self.restore(), start=1):
            ray.get(self.actor.tell.remote(*observation))
        self.restored = told

    def suggest(self, context: Context) -> Suggestion:
        return self._ask(lambda: self.actor.suggest.remote(context))

    def tell(self, config: Config, context: Context, observation: Observation, verdict: Verdict) -> None:
        self._ask(lambda: self.actor.tell.remote(config, context, observation, verdict))

    def update_policy(self, policy: Policy) -> None:
        self.policy = policy
        self._ask(lambda: self.actor.update_policy.remote(policy))

    def node_id(self) -> str:
        """The Ray node the learner runs on."""
        return self._ask(lambda: self.actor.node_id.remote())
