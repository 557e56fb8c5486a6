"""Kafka broker loss (issue 41, fault 2): a 3-broker KRaft cluster on loopback (topics replicated 3 times,
`min.insync.replicas` 2), Filebeat producing with acks=all, the daemon judging a tuning change; the leader of the
pipeline's partition is killed (SIGKILL) in the window that judges the change. Nothing is lost, the window is
marked disturbed naming the broker, and the change is neither rolled back nor credited for it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from controller.daemon import Daemon
from controller.kafka_lag import close_open_watches
from controller.state import StateStore
from models.policy import Policy
from models.space import PIPELINE_SPACE
from replay.profiles import Profile, WorkloadSpec
from testbed import lifecycle
from testbed.broker_loss import KILL_AFTER_S, kill_broker, leader_of, restart_broker
from testbed.endpoints import live_pipeline
from testbed.harness import BackgroundLoad
from testbed.pipeline import PipelineSpec, load_pipeline
from tests.conftest import LOW_LATENCY, _write_pipeline
from tests.controller.test_daemon import Scripted

pytestmark = pytest.mark.slow
WINDOW_S = 10.0
STARTING_WINDOWS = 5  # at most, before the daemon has its incumbent and applies the candidate


@pytest.fixture(scope="module")
def cluster(installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineSpec]:
    """One Filebeat node into three brokers, each with its JMX exporter scraped by Prometheus; the probe's grace
    outlasts a failover, so an event it holds up is late, not lost."""
    path = _write_pipeline(tmp_path_factory.mktemp("broker-loss"), "brokerloss",
                           config=yaml.safe_load(LOW_LATENCY.read_text()), probe={"late_after_s": 60})
    spec = load_pipeline(path).sized(1, 3)
    lifecycle.up(spec)
    try:
        yield spec
    finally:
        close_open_watches()  # before the brokers the lag watch samples stop
        lifecycle.down(spec)




def test_the_leader_killed_while_a_change_is_judged_loses_nothing_and_the_window_is_not_judged(cluster, tmp_path):
    pipeline = live_pipeline(cluster)
    try:
        candidate = PIPELINE_SPACE.config({"filebeat.backoff": 0.02}, base=pipeline.current())  # a live change
        learner = Scripted(candidate)
        store = StateStore(tmp_path / "state")
        daemon = Daemon(pipeline, learner, Policy(), window_s=WINDOW_S, store=store)
        with BackgroundLoad(cluster, WorkloadSpec(Profile.steady, 200, 600.0, seed=41)) as load:
            daemon.warm_up()
            # the first windows ship what waited for Filebeat's first scan of the new log: the daemon holds
            started = [daemon.step() for _ in range(STARTING_WINDOWS) if pipeline.current() != candidate]
            assert started[-1].action == "explore" and pipeline.current() == candidate, [d.reason for d in started]
            incumbent, told = daemon.incumbent, len(learner.told)

            leader = leader_of(cluster)
            killer = threading.Timer(KILL_AFTER_S, kill_broker, args=(cluster, leader))
            killer.start()
            disturbed = daemon.step()  # the window that judges the candidate, its partition's leader killed in it
            killer.join()
            assert disturbed.action == "hold" and not disturbed.change and not disturbed.guardrail, disturbed.reason
            assert disturbed.reason.startswith("disturbed: ") and f"broker {leader} missed" in disturbed.reason
            # the partition without a leader for the rest of the window: judged, the guardrail would have rolled back
            assert disturbed.observed["throughput_ratio"] < Policy().min_throughput_ratio
            assert daemon.rollbacks == 0 and pipeline.current() == candidate  # not blamed
            assert len(learner.told) == told and daemon.incumbent == incumbent  # nor credited
            assert store.decisions()[-1]["reason"] == disturbed.reason

            # the broker stays down: the other two lead its partitions without it in sync
            down = daemon.step()
            assert down.action == "hold" and "under-replicated partitions" in down.reason, down.reason
            assert daemon.rollbacks == 0 and len(learner.told) == told

            restart_broker(cluster, leader, pipeline)
            judged = daemon.step()  # the cluster whole and steady: the candidate's own window answers for it
            assert not judged.reason.startswith("disturbed"), judged.reason
            assert len(learner.told) == told + 1 and learner.told[-1][0] == candidate
        ledger = load.ledger()
        assert ledger["expected"] > 0 and ledger["lost"] == 0, ledger
    finally:
        pipeline.close()
