"""A daemon that runs until stopped: the stop seam, revert on exit, resuming the numbering, and staying bounded."""

import json

from controller.daemon import RESTART_BUDGET_S, Daemon
from controller.pipelines import ApplyReport, TwinPipeline
from controller.state import StateStore
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import load
from tests.controller.test_daemon import WINDOW_S, Scripted, _steady_load

CHANGED = PIPELINE_SPACE.config({"kafka.broker.num.io.threads": 4})  # live: no restart window to wait out


class StopsDuring(TwinPipeline):
    """The twin; `stop` is set (as a signal handler would) while the `at`-th window is being measured."""

    def __init__(self, at: int, start=None) -> None:
        super().__init__(start or preset("defaults"), _steady_load(), load("paper-2vcpu"), seed=1)
        self.at, self.observed, self.daemon = at, 0, None

    def observe(self, seconds):
        self.observed += 1
        if self.observed == self.at:
            self.daemon.stop.set()
        return super().observe(seconds)


def _stopping_daemon(at: int, store: StateStore, learner=None, start=None) -> tuple[Daemon, StopsDuring]:
    pipeline = StopsDuring(at, start)
    pipeline.daemon = Daemon(pipeline, learner or Scripted(CHANGED), Policy(), window_s=WINDOW_S, store=store)
    return pipeline.daemon, pipeline


def test_a_stop_mid_window_finishes_and_records_that_window_and_applies_nothing_new(tmp_path):
    store = StateStore(tmp_path)
    decisions = []
    daemon, pipeline = _stopping_daemon(3, store)  # warm-up, window 0, then the stop during window 1
    assert daemon.run(None, on_decision=decisions.append) == 2
    assert [d.window for d in decisions] == [0, 1]
    assert decisions[0].action == "explore" and pipeline.current() == CHANGED
    last = decisions[1]
    assert last.action == "hold" and last.reason.startswith("stopping") and not last.change
    assert pipeline.current() == CHANGED  # the config in force stays
    logged = store.decisions()
    assert [d["seq"] for d in logged] == [0, 1]
    observations = store.observations()
    assert [dict(config) for config, *_ in observations] == [d["config"] for d in logged]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["last_decision"]["window"] == 1 and status["learner"]["observations"] == 2


def test_revert_puts_the_starting_config_back_and_records_it(tmp_path):
    store = StateStore(tmp_path)
    daemon, pipeline = _stopping_daemon(3, store)
    daemon.run(None)
    decision = daemon.revert(preset("defaults"))
    assert pipeline.current() == preset("defaults")
    assert decision.action == "revert" and decision.window == 2
    assert decision.change == {"kafka.broker.num.io.threads": [4, preset("defaults")["kafka.broker.num.io.threads"]]}
    assert store.decisions()[-1]["action"] == "revert"


def test_a_restarted_daemon_continues_the_window_numbering(tmp_path):
    first, pipeline = _stopping_daemon(3, StateStore(tmp_path))
    first.run(None)
    again, _ = _stopping_daemon(4, StateStore(tmp_path), Scripted(), start=pipeline.current())  # as it was left
    assert again.resume() == 2
    again.run(None)
    assert [d["window"] for d in StateStore(tmp_path).decisions()] == [0, 1, 2, 3, 4]
    assert [d["seq"] for d in StateStore(tmp_path).decisions()] == [0, 1, 2, 3, 4]


class Instant:
    """A pipeline that measures the same healthy window at once, whatever runs; restarts cost no pause."""

    def __init__(self) -> None:
        self.config = preset("defaults")

    def apply(self, config):
        self.config = config
        return ApplyReport(True, config)

    def observe(self, seconds):
        return Observation(duration_s=seconds, offered_eps=300, throughput_eps=300, p50_s=0.5, p95_s=1.0,
                           p99_s=1.2, mean_s=0.5, events_in=int(300 * seconds), events_out=int(300 * seconds))

    def current(self):
        return self.config


def test_the_restart_budget_remembers_only_the_last_hour():
    window_s = 600.0  # six windows an hour
    restarts = PIPELINE_SPACE.config({"filebeat.output.bulk_max_size": 512})
    daemon = Daemon(Instant(), Scripted(*[restarts, preset("defaults")] * 20), Policy(), window_s=window_s)
    assert daemon.run(40) == 40
    assert daemon.metrics.restarts._value.get() == 40
    assert len(daemon._restart_times) <= RESTART_BUDGET_S / window_s


def _bounded(learner) -> tuple[Daemon, TwinPipeline]:
    pipeline = TwinPipeline(preset("defaults"), _steady_load(), load("paper-2vcpu"), seed=1)
    return Daemon(pipeline, learner, Policy(), window_s=WINDOW_S), pipeline


def test_a_bounded_run_ends_on_its_incumbent_the_config_its_summary_calls_final():
    """`run(windows)`: no window would judge a change made on the last one, so the run ends on its incumbent (`autotune
    --windows N` keeps the config in force and reports the incumbent as final): a candidate judged no better goes
    back, one judged better stays, and the learner's next candidate is never applied."""
    defaults, never = preset("defaults"), PIPELINE_SPACE.config({"filebeat.output.bulk_max_size": 512})
    slower = PIPELINE_SPACE.config({**defaults, "filebeat.backoff": 3.0, "filebeat.max_backoff": 10.0})
    faster = PIPELINE_SPACE.config({**defaults, "filebeat.queue.mem.flush.timeout": 0.1})
    for candidate, action in ((slower, "return"), (faster, "hold")):
        decisions = []
        daemon, pipeline = _bounded(Scripted(candidate, never))
        assert daemon.run(2, on_decision=decisions.append) == 2
        assert [d.action for d in decisions] == ["explore", action], [d.reason for d in decisions]
        assert decisions[-1].reason.startswith("the run's last window")
        assert pipeline.current() == daemon.incumbent.config == (defaults if candidate is slower else faster)
