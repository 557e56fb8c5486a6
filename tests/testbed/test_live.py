"""The real pipeline end to end: replayed lines reach the probe through Filebeat and Kafka, nothing is lost,
and the probe's histograms come back through Prometheus."""

import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from controller.telemetry import PrometheusTelemetry
from models.observation import Observation
from models.space import PIPELINE_SPACE
from replay import arrivals
from testbed import agent, lifecycle, processes
from testbed.endpoints import live_pipeline
from testbed.harness import new_run_id, replay_and_check, replay_into, wait_for_report
from testbed.pipeline import load_pipeline
from testbed.prometheus import prometheus_url

LOW_LATENCY = Path(__file__).resolve().parents[2] / "testbed" / "configs" / "low-latency.yaml"

pytestmark = pytest.mark.slow


def test_every_replayed_request_reaches_the_probe(testbed):
    run = replay_and_check(testbed, arrivals.steady(500, 4))
    assert run.events == 2000
    assert run.report.complete and run.report.lost_events == 0 and run.report.received == 2000
    assert run.report.duplicate_events == 0


def _wait_until(condition, timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s` (a bound, not a sleep assumed long enough)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(0.2)


def test_latency_histograms_read_back_through_prometheus(testbed):
    run = replay_and_check(testbed, arrivals.steady(400, 5))
    assert run.report.complete
    arrived, telemetry = time.time(), PrometheusTelemetry(prometheus_url(testbed))
    # the last events' scrape: a sample of the probe taken after every event had arrived
    _wait_until(lambda: telemetry.scalar("timestamp(pipetune_events_total)", time.time()) > arrived, 60,
                "a scrape of the probe after the run")
    observation = telemetry.window(run.started_at - 1, time.time())
    assert observation.events_out >= 0.8 * run.events  # increase() extrapolates at the window's edges
    assert 0 < observation.p50_s <= observation.p95_s <= observation.p99_s < 10
    assert set(observation.stage_p95_s) == {"filebeat_read", "filebeat_publish", "kafka_consume"}
    assert observation.offered_eps > 0 and observation.throughput_eps > 0
    assert {"filebeat", "prometheus", "probe"} <= set(observation.cpu_cores)
    assert [part for part in observation.cpu_cores if part.startswith("broker-")] == ["broker-1"]  # its JMX exporter
    assert "kafka" not in observation.cpu_cores  # counted once: the probe no longer reads the broker's process
    # the node agent's whole-node CPU, over its cores: busy with at least the pipeline's own processes
    # (rate() extrapolates to the window's edges: a saturated node reads a little above 1)
    assert sum(observation.cpu_cores.values()) / os.cpu_count() * 0.5 < observation.busiest_cpu_share <= 1.05


def test_the_agent_counts_what_is_appended_and_the_backlog_drains(testbed):
    """The offered load and the source backlog come from the node agent (its /metrics, scraped with its token)."""
    telemetry = PrometheusTelemetry(prometheus_url(testbed))
    appended = "sum(pipetune_source_events_total)"
    # timestamp() of an aggregate is the query's own time; of the bare series, the time of its last scrape
    scraped = "min(timestamp(pipetune_source_events_total))"
    started = time.time()
    _wait_until(lambda: telemetry.scalar(scraped, time.time()) > started, 60, "a scrape of the agent")
    before = telemetry.scalar(appended, time.time())
    run = replay_and_check(testbed, arrivals.steady(500, 4))
    assert run.report.complete
    written = time.time()
    _wait_until(lambda: telemetry.scalar(scraped, time.time()) > written, 60, "a scrape of the agent after the run")
    # Canary lines the agent writes into the same log, if any, are appended events too (a few a second).
    counted = telemetry.scalar(appended, time.time()) - before
    assert run.events <= counted <= run.events + 10 * (time.time() - started)
    _wait_until(lambda: telemetry.scalar("sum(pipetune_source_backlog_bytes)", time.time()) == 0, 60,
                "the source backlog back at 0 once Filebeat shipped every line")


def test_filebeat_killed_mid_run_is_restarted_by_the_agent_and_loses_nothing(testbed):
    filebeat = lifecycle.recorded_services(testbed)["filebeat"]
    pid = processes.running_pid(filebeat)
    with agent.client(testbed) as client:
        def restarts() -> int:  # audited once the restarted Filebeat is healthy
            return sum(entry["event"] == "restarted" for entry in client.audit("filebeat"))

        before = restarts()
        run_id = new_run_id()
        replay = threading.Thread(target=replay_into, args=(testbed, arrivals.steady(500, 6), run_id))
        replay.start()
        time.sleep(2.5)
        processes.stop(filebeat)  # outside any change: only the agent's supervision brings it back
        deadline = time.monotonic() + 30
        while restarts() == before and time.monotonic() < deadline:
            time.sleep(0.2)
        replay.join()
        assert restarts() == before + 1
    assert processes.running_pid(filebeat) not in (None, pid)
    report = wait_for_report(testbed, run_id, testbed.probe.late_after_s + 10)
    assert report.lost_events == 0, report.lost_sample
    assert report.received == report.expected == 3000
    assert report.duplicate_events >= 0  # at-least-once: re-sent events are counted, and allowed


def test_input_and_queue_settings_restart_filebeat(testbed):
    filebeat = lifecycle.recorded_services(testbed)["filebeat"]
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    pid = processes.running_pid(filebeat)
    try:
        changed = PIPELINE_SPACE.config({"filebeat.max_backoff": 5.0}, base=before)  # backoff <= it <= scan
        assert lifecycle.apply(testbed, changed) == "filebeat restarted"  # a live reload can lose a line
        assert processes.running_pid(filebeat) not in (None, pid)
        inputs = (testbed.resolved_run_dir() / "filebeat" / "inputs.d" / "replay.yml").read_text()
        assert "backoff.max: 5s" in inputs
        assert pipeline.current() == changed
        pid = processes.running_pid(filebeat)
        queue = PIPELINE_SPACE.config({"filebeat.queue.mem.events": 8192}, base=changed)
        assert lifecycle.apply(testbed, queue) == "filebeat restarted"
        assert processes.running_pid(filebeat) not in (None, pid)
        assert replay_and_check(testbed, arrivals.steady(300, 2)).report.lost_events == 0
    finally:
        lifecycle.apply(testbed, before)


def test_consumer_settings_recreate_the_probe_through_the_agent(testbed):
    probe = lifecycle.recorded_services(testbed)["probe"]
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    pid = processes.running_pid(probe)
    try:
        changed = PIPELINE_SPACE.config({"kafka.consumer.fetch.min.bytes": 512}, base=before)
        assert lifecycle.apply(testbed, changed) == "probe restarted"
        assert processes.running_pid(probe) not in (None, pid)
        properties = (testbed.resolved_run_dir() / "probe" / "consumer.properties").read_text()
        assert "fetch.min.bytes=512" in properties
        assert pipeline.current()["kafka.consumer.fetch.min.bytes"] == 512
        assert replay_and_check(testbed, arrivals.steady(300, 2)).report.lost_events == 0
    finally:
        lifecycle.apply(testbed, before)


def test_live_pipeline_applies_and_observes_like_the_twin(testbed):
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    changed = PIPELINE_SPACE.config({"filebeat.output.bulk_max_size": 512}, base=before)
    try:
        report = pipeline.apply(changed)
        assert report.ok and report.pause_s > 0 and "filebeat restarted" in report.message
        assert pipeline.current() == changed
        with agent.client(testbed) as client:  # the change went through the agent, as a new version
            started, applied = client.audit("filebeat")[-2:]
        assert started["event"] == "change_started" and started["changes"] == {"filebeat.output.bulk_max_size": 512}
        assert applied["event"] == "applied" and applied["action"] == "restarted"
        replay = threading.Thread(target=replay_into, args=(testbed, arrivals.steady(300, 16), new_run_id()))
        replay.start()
        # The window opens once events flow end to end (the replay's start and a just-restarted Filebeat take
        # a while on a busy machine), and the replay outlasts it: it holds events whatever that while was.
        telemetry = PrometheusTelemetry(prometheus_url(testbed))
        _wait_until(lambda: telemetry.scalar("increase(pipetune_events_total[3s])", time.time()) > 0, 10,
                    "events reaching the probe")
        observation = pipeline.observe(4.0)
        replay.join()
        assert isinstance(observation, Observation) and observation.duration_s >= 4.0
        assert observation.events_out > 0 and observation.p95_s > 0
        assert set(observation.stage_p95_s) == {"nginx->filebeat", "filebeat", "kafka->sink"}  # as the twin names them
    finally:
        assert pipeline.apply(before).ok


def test_live_pipeline_reports_a_change_the_broker_refuses(testbed):
    pipeline = live_pipeline(testbed)
    before = pipeline.current()
    # The broker refuses to more than double a thread pool: the agent's check rejects it, nothing changes.
    report = pipeline.apply(PIPELINE_SPACE.config({"kafka.broker.num.io.threads": 64}, base=before))
    assert not report.ok and f"kafka change rejected by the agent at {agent.agent_url(testbed)}" in report.message
    assert pipeline.current() == before == report.config


def test_multiline_events_through_the_log_input(installed, tmp_path, make_pipeline):
    config = yaml.safe_load(LOW_LATENCY.read_text())
    config["set"]["filebeat.multiline.timeout"] = 0.2
    spec = load_pipeline(make_pipeline(tmp_path, "multiline", config=config, log={"format": "multiline-json"},
                                       filebeat={"input": "log"}))
    lifecycle.up(spec)
    try:
        run = replay_and_check(spec, arrivals.steady(200, 2))
    finally:
        lifecycle.down(spec)
    assert run.report.complete and run.report.received == 400 and run.report.lost_events == 0
