"""A Kafka broker lost and brought back on the testbed's cluster (issue 41, fault 2): the partition's leader found,
killed with SIGKILL, started again and led again (Filebeat waits for every in-sync replica:
testbed.filebeat_layout). Shared by the fault's test and `bench.faults`."""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient

from controller.live import LivePipeline
from controller.pipelines import PipelineUnavailable
from testbed import lifecycle, processes
from testbed.kafka import brokers_ready
from testbed.pipeline import PipelineSpec

KILL_AFTER_S = 2.0  # into the judged window: most of it runs on a cluster that lost the partition's leader


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Until `condition` holds; `TimeoutError` naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not within {timeout_s:g} s")
        time.sleep(0.5)


def leader_of(spec: PipelineSpec) -> int:
    """The broker that leads the pipeline's partition (its topic has one)."""
    topic = spec.kafka.topics[0].name
    return AdminClient({"bootstrap.servers": spec.bootstrap}).list_topics(topic, timeout=30).topics[topic] \
        .partitions[0].leader


def broker_service(spec: PipelineSpec, broker: int) -> processes.Service:
    return lifecycle.recorded_services(spec)[f"kafka-{broker}"]


def kill_broker(spec: PipelineSpec, broker: int) -> None:
    """SIGKILL the broker's JVM: no controlled shutdown, its leaderships move once the controller fences it."""
    os.kill(processes.running_pid(broker_service(spec, broker)), signal.SIGKILL)


def cluster_now(pipeline: LivePipeline) -> str:
    """The last 3 s of the cluster as pipetune reads a window: "" when steady (every broker answering, no leader
    moving, no partition under-replicated), else its disturbance, or why the window cannot be read."""
    try:
        found = pipeline.telemetry.window(time.time() - 3, time.time()).disturbance
    except PipelineUnavailable as err:
        return str(err)
    return "" if found is None else str(found)


def wait_steady(pipeline: LivePipeline, what: str) -> None:
    deadline = time.monotonic() + 90
    while reading := cluster_now(pipeline):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not within 90 s: {reading}")
        time.sleep(0.5)


def restart_broker(spec: PipelineSpec, broker: int, pipeline: LivePipeline) -> None:
    """The broker started again and in sync, its partitions led by it again (as the controller's own rebalance
    would, minutes later), and the cluster steady for a few seconds."""
    service = broker_service(spec, broker)
    processes.start(service)
    processes.wait_ready(service, lambda: brokers_ready(spec), 90.0)
    wait_steady(pipeline, "every replica back in sync")
    admin = AdminClient({"bootstrap.servers": spec.bootstrap})  # held until the election's answer
    admin.elect_leaders(ElectionType.PREFERRED).result(30)
    wait_for(lambda: all(p.leader == p.replicas[0] for t in admin.list_topics(timeout=30).topics.values()
                          for p in t.partitions.values()), 90, "the leaders back on their preferred brokers")
    time.sleep(3 * spec.prometheus.scrape_interval_s)  # the brokers' new counts scraped: the next reading sees them
    wait_steady(pipeline, "the cluster steady after the election")
