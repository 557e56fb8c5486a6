"""Kafka broker loss (issue 41, fault 2): a 3-broker KRaft cluster on loopback (topics replicated 3 times,
`min.insync.replicas` 2), Filebeat producing with acks=all, the daemon judging a tuning change; the leader of the
pipeline's partition is killed (SIGKILL) in the window that judges the change. Nothing is lost, the window is
marked disturbed naming the broker, and the change is neither rolled back nor credited for it."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml
from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient

from controller.daemon import Daemon
from controller.kafka_lag import close_open_watches
from controller.live import LivePipeline
from controller.pipelines import PipelineUnavailable
from controller.state import StateStore
from models.policy import Policy
from models.space import PIPELINE_SPACE
from replay.profiles import Profile, WorkloadSpec
from testbed import lifecycle, processes
from testbed.endpoints import live_pipeline
from testbed.filebeat_layout import filebeat_layout
from testbed.harness import BackgroundLoad
from testbed.kafka import brokers_ready
from testbed.pipeline import PipelineSpec, load_pipeline
from tests.conftest import LOW_LATENCY, _write_pipeline
from tests.controller.test_daemon import Scripted

pytestmark = pytest.mark.slow
WINDOW_S = 10.0
KILL_AFTER_S = 2.0  # into the judged window: most of it runs on a cluster that lost the partition's leader
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


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(0.5)


def _acks_all(spec: PipelineSpec, pipeline: LivePipeline) -> None:
    """Filebeat's output waits for every in-sync replica (`required_acks: -1`, acks=all), set in its filebeat.yml by
    hand as an operator would; a restart-costing change through the agent (which keeps that edit) makes Filebeat
    read it."""
    main = filebeat_layout(spec, spec.node_layouts()[0]).home_dir / "filebeat.yml"
    main.write_text(main.read_text().replace("required_acks: 1\n", "required_acks: -1\n"))
    start = pipeline.current()
    report = pipeline.apply(PIPELINE_SPACE.config({"filebeat.queue.mem.events": 2 * start["filebeat.queue.mem.events"]},
                                                  base=start))
    assert report.ok and "filebeat restarted" in report.message, report.message
    assert "required_acks: -1\n" in main.read_text()


def _leader(spec: PipelineSpec) -> int:
    """The broker that leads the pipeline's partition (its topic has one)."""
    topic = spec.kafka.topics[0].name
    return AdminClient({"bootstrap.servers": spec.bootstrap}).list_topics(topic, timeout=30).topics[topic] \
        .partitions[0].leader


def _broker(spec: PipelineSpec, broker: int) -> processes.Service:
    return lifecycle.recorded_services(spec)[f"kafka-{broker}"]


def _kill(spec: PipelineSpec, broker: int) -> None:
    """SIGKILL the broker's JVM: no controlled shutdown, its leaderships move once the controller fences it."""
    os.kill(processes.running_pid(_broker(spec, broker)), signal.SIGKILL)


def _cluster_now(pipeline: LivePipeline) -> str:
    """The last 3 s of the cluster as pipetune reads a window: "" when steady (every broker answering, no leader
    moving, no partition under-replicated), else its disturbance, or why the window cannot be read."""
    try:
        found = pipeline.telemetry.window(time.time() - 3, time.time()).disturbance
    except PipelineUnavailable as err:
        return str(err)
    return "" if found is None else str(found)


def _wait_steady(pipeline: LivePipeline, what: str) -> None:
    deadline = time.monotonic() + 90
    while reading := _cluster_now(pipeline):
        assert time.monotonic() < deadline, f"{what} not within 90 s: {reading}"
        time.sleep(0.5)


def _back(spec: PipelineSpec, broker: int, pipeline: LivePipeline) -> None:
    """The broker started again and in sync, its partitions led by it again (as the controller's own rebalance
    would, minutes later), and the cluster steady for a few seconds."""
    service = _broker(spec, broker)
    processes.start(service)
    processes.wait_ready(service, lambda: brokers_ready(spec), 90.0)
    _wait_steady(pipeline, "every replica back in sync")
    admin = AdminClient({"bootstrap.servers": spec.bootstrap})  # held until the election's answer
    admin.elect_leaders(ElectionType.PREFERRED).result(30)
    _wait_for(lambda: all(p.leader == p.replicas[0] for t in admin.list_topics(timeout=30).topics.values()
                          for p in t.partitions.values()), 90, "the leaders back on their preferred brokers")
    time.sleep(3 * spec.prometheus.scrape_interval_s)  # the brokers' new counts scraped: the next reading sees them
    _wait_steady(pipeline, "the cluster steady after the election")


def test_the_leader_killed_while_a_change_is_judged_loses_nothing_and_the_window_is_not_judged(cluster, tmp_path):
    pipeline = live_pipeline(cluster)
    try:
        _acks_all(cluster, pipeline)
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

            leader = _leader(cluster)
            killer = threading.Timer(KILL_AFTER_S, _kill, args=(cluster, leader))
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

            _back(cluster, leader, pipeline)
            judged = daemon.step()  # the cluster whole and steady: the candidate's own window answers for it
            assert not judged.reason.startswith("disturbed"), judged.reason
            assert len(learner.told) == told + 1 and learner.told[-1][0] == candidate
        ledger = load.ledger()
        assert ledger["expected"] > 0 and ledger["lost"] == 0, ledger
    finally:
        pipeline.close()
