"""Every pool of a deployment in one process: a `Daemon` per pool, each looping in a thread of its own.

A pool has its own config, its own learner (a Ray actor, `controller.ray_learner`), its own pipeline
over only its nodes and its own state directory (`controller.state.plan_pool_dirs`). The daemon's calls
to agents block; in a thread per pool, a pool whose agent hangs or is gone stalls only its own loop
while every other pool keeps deciding. `Daemon` itself stays a single-pool loop: it records an unexpected
error and goes on, and what ends its loop (the same error window after window, `PersistentError`) ends
that pool's alone, its message kept in `PoolRun.error`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from controller.daemon import Daemon, DaemonMetrics
from controller.pipelines import Measured, PipelineUnavailable
from controller.ray_learner import RemoteLearner
from controller.realizer import Driven, Realizer
from controller.state import Decision, PoolDir, StateStore, save_pool_dirs
from controller.tuned_space import TunedSpace
from models.learning import Learner
from models.policy import Policy
from models.space import Config

# Builds a pool's learner from the config it starts on and the policy it follows (a Ray actor in the daemon), with
# the pool's tuned space (None: every parameter is applied, as on the twin); asks the pool's agents what they apply.
LearnerFactory = Callable[[str, Config, Policy], tuple[Learner, TunedSpace | None]]


@dataclass
class PoolRun:
    """One pool's loop: its pipeline, realizer and state directory, then (once its pipeline answers) its daemon."""

    pool: PoolDir
    pipeline: Measured
    realizer: Realizer
    store: StateStore
    metrics: DaemonMetrics = field(default_factory=DaemonMetrics)
    daemon: Daemon | None = None  # built in the pool's thread: asking a hung agent must not hold up the others
    started_from: Config | None = None
    resumed: int = 0
    error: BaseException | None = field(default=None, repr=False)  # what ended the loop, if not a stop

    @property
    def name(self) -> str:
        return self.pool.name


def pool_runs(pools: list[tuple[PoolDir, Driven]], directory: Path) -> list[PoolRun]:
    """A run per pool over what it drives and its state directory; writes `pools.json`, which the API reads."""
    save_pool_dirs(directory, [pool for pool, _ in pools])
    return [PoolRun(pool, pipeline, realizer, StateStore(pool.directory)) for pool, (pipeline, realizer) in pools]


def relearn(daemon: Daemon) -> None:
    """Teach `daemon`'s learner, built anew, what it knew: today's policy and every stored observation."""
    daemon.learner.update_policy(daemon.policy)
    daemon.told = 0
    daemon.resume()


class PoolRunner:
    """Runs each pool's daemon in its own thread until its windows are done or `stop` is set.

    A pool's daemon resumes from its state directory: the policy and incumbent stored there win over
    `policy` and the config its pipeline runs, which the learner otherwise starts from.
    """

    def __init__(self, runs: list[PoolRun], learner_for: LearnerFactory, policy: Policy, *, window_s: float) -> None:
        names = [r.name for r in runs]
        if not runs or len(set(names)) != len(names):
            raise ValueError(f"pools must be one or more, each named once; got {names}")
        self.runs = {r.name: r for r in runs}
        self.learner_for = learner_for
        self.policy = policy
        self.window_s = window_s
        self.stop = threading.Event()  # every pool's: set from anywhere (a signal handler), each ends its window
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # on_decision is called from every pool's thread

    def start(self, windows: int | None, on_decision: Callable[[str, Decision], None] | None = None,
              wall_s_per_window: float = 0.0) -> None:
        """Start every pool's loop (`Daemon.run` with these arguments) in a thread of its own."""
        for run in self.runs.values():
            thread = threading.Thread(target=self._loop, args=(run, windows, on_decision, wall_s_per_window),
                                      name=f"pipetune-pool-{run.name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _prepare(self, run: PoolRun) -> Daemon | None:
        """The pool's daemon, once its pipeline says what it runs (None if stopped before it did)."""
        while not self.stop.is_set():
            policy = run.store.load_policy() or self.policy
            incumbent = run.store.load_incumbent()
            try:
                run.started_from = run.pipeline.current()
                learner, space = self.learner_for(run.name, incumbent.config if incumbent else run.started_from,
                                                  policy)
            except PipelineUnavailable:
                self.stop.wait(self.window_s)  # nothing to tune until its agents answer: ask again a window later
                continue
            daemon = Daemon(run.pipeline, learner, policy, window_s=self.window_s, store=run.store,
                            metrics=run.metrics, name=run.name, realizer=run.realizer, space=space)
            daemon.stop = self.stop
            if isinstance(learner, RemoteLearner):  # lost with its Ray node, it is taught again from the store
                learner.on_restore = partial(relearn, daemon)
            run.resumed = daemon.resume()
            return daemon
        return None

    def _loop(self, run: PoolRun, windows: int | None, on_decision: Callable[[str, Decision], None] | None,
              wall_s_per_window: float) -> None:
        def told(decision: Decision) -> None:
            if on_decision:
                with self._lock:
                    on_decision(run.name, decision)

        try:
            run.daemon = self._prepare(run)
            if run.daemon is not None:
                run.daemon.run(windows, on_decision=told, wall_s_per_window=wall_s_per_window)
        except Exception as exc:  # what ends one pool's loop (a persistent error) does not end the others'
            run.error = exc

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for every pool's loop to end; whether all did within `timeout_s` (a pool waiting on a hung
        agent ends when the agent answers or the request times out)."""
        for thread in self._threads:
            thread.join(timeout_s)
        return not self.running()

    def running(self) -> list[str]:
        """The pools whose loop has not ended."""
        return [t.name.removeprefix("pipetune-pool-") for t in self._threads if t.is_alive()]
