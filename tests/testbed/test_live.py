"""The real pipeline end to end: replayed lines reach the probe through Filebeat and Kafka, nothing is lost,
and the probe's histograms come back through Prometheus."""

import threading
import time

import pytest

from controller.live import new_run_id, replay_and_check, replay_into, wait_for_report
from controller.telemetry import PrometheusTelemetry
from replay import arrivals
from testbed import bed, processes
from testbed.prometheus import prometheus_url

pytestmark = pytest.mark.slow


def test_every_replayed_request_reaches_the_probe(testbed):
    run = replay_and_check(testbed, arrivals.steady(500, 4))
    assert run.events == 2000
    assert run.report.complete and run.report.lost_events == 0 and run.report.received == 2000
    assert run.report.duplicate_events == 0


def test_latency_histograms_read_back_through_prometheus(testbed):
    run = replay_and_check(testbed, arrivals.steady(400, 5))
    assert run.report.complete
    time.sleep(3 * testbed.prometheus.scrape_interval_s)  # the last events' scrape
    observation = PrometheusTelemetry(prometheus_url(testbed)).window(run.started_at - 1, time.time())
    assert observation.events_out >= 0.8 * run.events  # increase() extrapolates at the window's edges
    assert 0 < observation.p50_s <= observation.p95_s <= observation.p99_s < 10
    assert set(observation.stage_p95_s) == {"filebeat_read", "filebeat_publish", "kafka_consume"}
    assert observation.offered_eps > 0 and observation.throughput_eps > 0


def test_filebeat_restarted_mid_run_loses_nothing(testbed):
    filebeat = bed.recorded_services(testbed)["filebeat"]
    run_id = new_run_id()
    replay = threading.Thread(target=replay_into, args=(testbed, arrivals.steady(500, 6), run_id))
    replay.start()
    time.sleep(2.5)
    processes.stop(filebeat)
    time.sleep(0.5)
    processes.start(filebeat)
    replay.join()
    report = wait_for_report(testbed, run_id, testbed.probe.late_after_s + 10)
    assert report.lost_events == 0, report.lost_sample
    assert report.received == report.expected == 3000
    assert report.duplicate_events >= 0  # at-least-once: re-sent events are counted, and allowed
