"""`PrometheusTelemetry` against a real Prometheus scraping an exporter of the test's own (the probe's and
the agent's metric names, values the test sets): the latency source the deployment names is the one
read, a histogram without a `source` label (an older probe's) reads as event time, `worst` takes the
worse of both, and the offered load, throughput and backlog come from the sources and the probe."""

from __future__ import annotations

import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
import yaml
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from controller.kafka_lag import LagSample, LagWatch
from controller.telemetry import PrometheusTelemetry, TelemetryMissing, edge_events
from testbed.processes import Service, start, stop, wait_ready
from tests.conftest import free_ports

pytestmark = pytest.mark.slow
BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0)


class Exporter:
    """Serves whichever registry the test put in place, on loopback."""

    def __init__(self, port: int) -> None:
        self.registry = CollectorRegistry()
        self.down = False  # answers 503 while set: Prometheus records the target as not scraped (up 0)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 — http.server's name
                if exporter.down:
                    self.send_error(503)
                    return
                body = generate_latest(exporter.registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def prometheus(installed, tmp_path_factory) -> Iterator[tuple[Exporter, PrometheusTelemetry]]:
    home = tmp_path_factory.mktemp("prometheus")
    exporter_port, port = free_ports(2)
    exporter = Exporter(exporter_port)
    config = home / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "exporter", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}]}))
    service = Service("prometheus", (str(installed.prometheus), f"--config.file={config}",
                                     f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"),
                      home)
    start(service)
    telemetry = PrometheusTelemetry(f"http://127.0.0.1:{port}")
    try:
        wait_ready(service, lambda: _scalar(telemetry, "up") == 1, 60)
        yield exporter, telemetry
    finally:
        stop(service)
        exporter.server.shutdown()


def _scalar(telemetry: PrometheusTelemetry, query: str) -> float:
    try:
        return telemetry.scalar(query, time.time())
    except TelemetryMissing:
        return math.nan


def _scraped_after(telemetry: PrometheusTelemetry, metric: str, moment: float) -> None:
    """Wait for a scrape that holds `metric` taken after `moment`."""
    deadline = time.monotonic() + 60
    while not _scalar(telemetry, f"timestamp({metric})") > moment:
        assert time.monotonic() < deadline, f"no scrape of {metric} within 60 s"
        time.sleep(0.2)


def _sources(registry: CollectorRegistry, events: int, backlog_bytes: int, node: str = "edge-1"):
    """The agent's metrics: `events` lines of 100 bytes appended, `backlog_bytes` not shipped; returns a function
    that appends more."""
    labels = {"path": "/var/log/nginx/access.log", "node": node}
    appended = Counter("pipetune_source_events", "", list(labels), registry=registry).labels(**labels)
    appended_bytes = Counter("pipetune_source_bytes", "", list(labels), registry=registry).labels(**labels)
    Gauge("pipetune_source_backlog_bytes", "", list(labels), registry=registry).labels(**labels).set(backlog_bytes)

    def append(more: int) -> None:
        appended.inc(more)
        appended_bytes.inc(100 * more)
    append(events)
    return append


def _window(exporter: Exporter, telemetry: PrometheusTelemetry, fill, probe_counter: str) -> tuple[float, float]:
    """A window in which the exporter's metrics went from zero (scraped) to what `fill` sets (scraped)."""
    registry = CollectorRegistry()
    counters = fill(registry)
    exporter.registry = registry
    # The window's range (rounded to whole seconds, so up to 0.5 s either side of start_s) must hold no
    # scrape of the registry before: another test's counters falling to zero read as a reset, and
    # increase() would count them and extrapolate each series differently.
    time.sleep(1.5)
    start_s = time.time()
    _scraped_after(telemetry, probe_counter, start_s + 0.5)  # a scrape of the zeros inside the range
    counters()
    filled = time.time()
    _scraped_after(telemetry, probe_counter, filled)
    _scraped_after(telemetry, probe_counter, time.time())  # a second scrape: increase() sees the step inside
    return start_s, time.time()


def test_the_latency_source_is_the_one_the_deployment_names(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage", "source", "node"], buckets=BUCKETS,
                            registry=registry)
        records = Counter("pipetune_records", "", registry=registry)
        for source in ("event_time", "canary"):
            latency.labels(stage="e2e", source=source, node="edge-1")
        records.inc(0)
        _sources(registry, 0, 0)

        def counters() -> None:
            for _ in range(95):
                latency.labels(stage="e2e", source="event_time", node="edge-1").observe(0.008)
            for _ in range(5):
                latency.labels(stage="e2e", source="canary", node="edge-1").observe(1.5)
            records.inc(100)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    event_time = telemetry.window(start_s, end_s)
    canary = PrometheusTelemetry(telemetry.url, "canary").window(start_s, end_s)
    worst = PrometheusTelemetry(telemetry.url, "worst").window(start_s, end_s)
    assert 0.005 < event_time.p95_s <= 0.01
    assert 1.0 < canary.p95_s <= 2.0
    assert worst.p95_s == canary.p95_s and worst.p50_s == canary.p50_s
    assert event_time.events_out > 0 and event_time.throughput_eps > 0  # every record, of both sources
    # either is read from the probe's histograms, whose first bucket is a millisecond wide: no finer latency
    assert event_time.latency_resolution_s == canary.latency_resolution_s == 0.001


def test_the_warehouse_stage_is_the_latency_when_the_deployment_names_it(prometheus):
    """A Spark job's `warehouse` stage (testbed/spark_job.py: write -> the micro-batch committed) beside the probe's
    `e2e`: with `latency_stage="warehouse"` the window's percentiles, its throughput and each node's histogram are the
    table's (a job behind the topic reads behind), and the other stages stay per-stage figures."""
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage", "source", "node"], buckets=BUCKETS,
                            registry=registry)
        records = Counter("pipetune_records", "", registry=registry)
        for stage in ("e2e", "warehouse", "warehouse_commit"):
            latency.labels(stage=stage, source="event_time", node="edge-1")
        records.inc(0)
        append = _sources(registry, 0, 0)

        def counters() -> None:
            append(100)
            for i in range(100):
                latency.labels(stage="e2e", source="event_time", node="edge-1").observe(0.008)
                if i < 40:  # the Spark job committed 40 of the 100 records the probe consumed from the topic
                    latency.labels(stage="warehouse", source="event_time", node="edge-1").observe(3.0)
                    latency.labels(stage="warehouse_commit", source="event_time", node="edge-1").observe(0.8)
            records.inc(100)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    to_kafka = telemetry.window(start_s, end_s)
    table = PrometheusTelemetry(telemetry.url, latency_stage="warehouse")
    to_table = table.window(start_s, end_s)
    assert 0.005 < to_kafka.p95_s <= 0.01
    assert 2.0 < to_table.p95_s <= 5.0 and 2.0 < to_table.p50_s <= 5.0
    assert set(to_table.stage_p95_s) == {"warehouse_commit"}
    assert 0.5 < to_table.stage_p95_s["warehouse_commit"] <= 1.0
    assert to_table.events_out == pytest.approx(0.4 * to_kafka.events_out, rel=0.05)  # the rows, not the records
    assert to_table.throughput_eps == pytest.approx(0.4 * to_kafka.throughput_eps, rel=0.05)
    # what the job holds, that a window's end may cut off: the offered rate × an event's 3 s in it (Little's law)
    assert to_table.sink_held_events == pytest.approx(to_table.offered_eps * to_table.mean_s)
    assert to_table.sink_held_events > 0
    assert to_kafka.sink_held_events == 0  # the probe's records are counted as they flow
    counts = table.node_histograms(start_s, end_s)["edge-1"].counts  # increase() extrapolates: ~100, not exactly
    assert counts[BUCKETS.index(5.0)] == sum(counts) > 0  # every one in (2, 5] s
    with pytest.raises(ValueError, match="latency stage warehouse: only events reach the table"):
        PrometheusTelemetry(telemetry.url, "canary", latency_stage="warehouse")


def test_each_nodes_latency_histogram_is_read_apart_for_the_canary_judgement(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage", "source", "node"], buckets=BUCKETS,
                            registry=registry)
        records = Counter("pipetune_records", "", registry=registry)
        # Node names no other test uses: a series another test left behind would reach back into this
        # window as a counter reset, and increase() would extrapolate the two nodes differently.
        for node in ("canary-1", "control-1"):
            latency.labels(stage="e2e", source="event_time", node=node)
        records.inc(0)
        _sources(registry, 0, 0)

        def counters() -> None:
            for node, seconds in (("canary-1", 0.008), ("control-1", 0.3)):
                for _ in range(100):
                    latency.labels(stage="e2e", source="event_time", node=node).observe(seconds)
            records.inc(200)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    histograms = telemetry.node_histograms(start_s, end_s)
    assert set(histograms) == {"canary-1", "control-1"}
    canary, control = histograms["canary-1"], histograms["control-1"]
    assert 0.005 < canary.quantile_s() <= 0.01 and 0.1 < control.quantile_s() <= 0.5
    assert canary.total == control.total >= 100
    assert canary.upper_bounds_s[-1] == math.inf


def test_a_histogram_without_a_source_label_reads_as_event_time(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage"], buckets=BUCKETS, registry=registry)
        events = Counter("pipetune_events", "", registry=registry)
        unparsed = Counter("pipetune_unparsed_events", "", registry=registry)
        latency.labels(stage="e2e")
        _sources(registry, 0, 0)

        def counters() -> None:
            for _ in range(50):
                latency.labels(stage="e2e").observe(0.04)
            events.inc(50)
            unparsed.inc(50)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_events_total")
    observation = telemetry.window(start_s, end_s)
    assert 0.02 < observation.p95_s <= 0.05
    # Without pipetune_records_total, every record is what the older probe counted in two.
    parsed = telemetry.scalar(f"increase(pipetune_events_total[{round(end_s - start_s)}s])", end_s)
    assert observation.events_out == pytest.approx(2 * parsed, abs=1)
    assert math.isnan(PrometheusTelemetry(telemetry.url, "canary").window(start_s, end_s).p95_s)
    assert PrometheusTelemetry(telemetry.url, "worst").window(start_s, end_s).p95_s == observation.p95_s


class OneSample:
    def __init__(self, lag: int) -> None:
        self.lag = lag

    def sample(self) -> LagSample:
        return LagSample(time.time(), 1000 - self.lag, 1000)

    def close(self) -> None:
        pass


def test_what_the_counts_may_misplace_at_a_windows_edges_is_an_interval_of_the_largest_change_of_rate():
    lull = {"input_eps": [800.0, 420.0, math.nan, 0.0], "output_eps": [790.0, 500.0, 0.0]}
    assert edge_events(lull, interval_s=1.0) == pytest.approx(800.0)
    assert edge_events(lull, interval_s=15.0) == pytest.approx(12_000.0)
    assert edge_events({"input_eps": [800.0, 810.0, 795.0], "output_eps": [805.0, 790.0, 801.0]}, 1.0) == \
        pytest.approx(5.0)  # steady: next to nothing
    assert edge_events({"input_eps": [math.nan]}, 1.0) == 0.0


def test_offered_load_and_backlog_come_from_the_sources_and_the_group(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        records = Counter("pipetune_records", "", registry=registry)
        labels = {"path": "/var/log/nginx/access.log", "node": "edge-1"}
        appended = Counter("pipetune_source_events", "", list(labels), registry=registry).labels(**labels)
        appended_bytes = Counter("pipetune_source_bytes", "", list(labels), registry=registry).labels(**labels)
        backlog = Gauge("pipetune_source_backlog_bytes", "", list(labels), registry=registry).labels(**labels)
        records.inc(0)

        def counters() -> None:
            appended.inc(400)
            appended_bytes.inc(40_000)  # 100 bytes an event
            backlog.set(3_000)  # 30 events not shipped
            records.inc(200)  # half of it reached the end
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    lag = LagWatch(OneSample(lag=70), span_s=10)
    observation = PrometheusTelemetry(telemetry.url, kafka_lag=lag).window(start_s, end_s)
    lag.close()
    assert observation.throughput_ratio == pytest.approx(0.5, rel=0.01)
    # the input's rate rose from none by 400 events over the last seconds, scraped every second
    assert 0.0 < observation.edge_events <= 400.0
    assert observation.backlog_events == {"source": 30, "kafka": 70}
    # brokers that export nothing (an operator's cluster without the JMX exporter): their cost unknown, not zero
    assert observation.produce_requests_per_s is None and observation.kafka_bytes_in_per_s is None
    assert not [part for part in observation.cpu_cores if part.startswith("broker-")]


def test_the_clusters_produce_requests_bytes_in_and_each_brokers_cpu_come_from_their_exporters(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        records = Counter("pipetune_records", "", registry=registry)
        _sources(registry, 0, 0)
        produce = Counter("kafka_network_requestmetrics_requests", "", ["request", "version", "broker"],
                          registry=registry)
        fetch = produce.labels("Fetch", "13", "1")  # the probe's: not what the pipeline costs the cluster
        bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "", ["broker"], registry=registry)
        cpu = Counter("process_cpu_seconds", "", ["broker"], registry=registry)  # the exporter's, per broker
        for broker in ("1", "2"):
            produce.labels("Produce", "9", broker).inc(0)
            bytes_in.labels(broker).inc(0)
            cpu.labels(broker).inc(0)

        def counters() -> None:
            records.inc(200)
            for broker, requests in (("1", 300), ("2", 100)):
                produce.labels("Produce", "9", broker).inc(requests)
                bytes_in.labels(broker).inc(800 * requests)
                cpu.labels(broker).inc(requests / 100)
            fetch.inc(5000)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    observation = telemetry.window(start_s, end_s)
    # every counter stepped between the same two scrapes: increase() stretches them alike
    assert observation.produce_requests_per_s == pytest.approx(2 * observation.throughput_eps, rel=0.01)
    assert observation.kafka_bytes_in_per_s == pytest.approx(800 * observation.produce_requests_per_s, rel=0.01)
    assert observation.cpu_cores["broker-1"] == pytest.approx(3 * observation.cpu_cores["broker-2"], rel=0.01)


def test_a_window_in_which_leaders_moved_and_replicas_fell_behind_is_disturbed_naming_the_broker(prometheus):
    exporter, telemetry = prometheus
    brokers: dict[str, Gauge] = {}

    def fill(registry: CollectorRegistry):
        records = Counter("pipetune_records", "", registry=registry)
        _sources(registry, 0, 0)
        for name in ("kafka_server_replicamanager_leadercount", "kafka_server_replicamanager_underreplicatedpartitions",
                     "kafka_controller_kafkacontroller_offlinepartitionscount"):
            brokers[name] = Gauge(name, "", ["broker"], registry=registry)
        for broker, led in (("1", 16), ("3", 17)):
            brokers["kafka_server_replicamanager_leadercount"].labels(broker).set(led)
            brokers["kafka_server_replicamanager_underreplicatedpartitions"].labels(broker).set(0)
            brokers["kafka_controller_kafkacontroller_offlinepartitionscount"].labels(broker).set(0)
        return lambda: records.inc(200)

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    assert telemetry.window(start_s, end_s).disturbance is None  # a whole cluster, leaders where they were

    def failover(registry: CollectorRegistry):
        counters = fill(registry)

        def moved() -> None:
            counters()
            brokers["kafka_server_replicamanager_leadercount"].labels("1").set(24)
            brokers["kafka_server_replicamanager_underreplicatedpartitions"].labels("1").set(24)
        return moved

    start_s, end_s = _window(exporter, telemetry, failover, "pipetune_records_total")
    found = telemetry.window(start_s, end_s).disturbance
    assert found.brokers == ("1",)
    assert str(found) == "leader change: broker 1 leads 16 → 24 partitions; under-replicated partitions: 24 on broker 1"


def test_a_component_that_started_anew_inside_the_window_disturbs_it_and_one_restarted_before_does_not(prometheus):
    """An operator who restarts Filebeat to load a hand edit stops its shipping for a while: the window measures that
    restart, not the config. pipetune's own restarts end before its windows start; a component that restarts in
    window after window crashes, and is judged."""
    exporter, telemetry = prometheus
    registry = CollectorRegistry()
    records = Counter("pipetune_records", "", registry=registry)
    _sources(registry, 0, 0)
    started = Gauge("pipetune_component_start_time_seconds", "", ["component"], registry=registry)
    started.labels("filebeat").set(500.0)
    exporter.registry = registry
    time.sleep(1.5)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    started.labels("filebeat").set(1_000.0)  # restarted by pipetune's change, which ends as the window starts
    start_s = time.time()
    _scraped_after(telemetry, "pipetune_records_total", start_s + 2.5)  # the process as it was, inside the window
    records.inc(10)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    steady_s = time.time()
    assert telemetry.window(start_s, steady_s).disturbance is None
    started.labels("filebeat").set(2_000.0)  # the operator's restart
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    found = telemetry.window(start_s, time.time()).disturbance
    assert found is not None and str(found) == "restarted outside pipetune: filebeat started 1 time in the window"
    start_s = time.time()  # the next window: it restarts again, as a component that crashes does
    _scraped_after(telemetry, "pipetune_records_total", start_s + 2.5)
    started.labels("filebeat").set(3_000.0)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    assert telemetry.window(start_s, time.time()).disturbance is None  # judged: the verdict may roll it back


def test_a_restart_whose_stop_came_as_the_window_began_disturbs_it_though_no_start_time_changed_inside(prometheus):
    """An operator restarting a component stops it first: its start time is not exported while it is down, so a stop
    just before the window leaves only the new start time inside it."""
    exporter, _ = prometheus
    telemetry = PrometheusTelemetry(_.url)  # its own: which window saw a restart last is the telemetry's state
    registry = CollectorRegistry()
    records = Counter("pipetune_records", "", registry=registry)
    _sources(registry, 0, 0)
    started = Gauge("pipetune_component_start_time_seconds", "", ["component"], registry=registry)
    started.labels("filebeat").set(time.time() - 60)  # pipetune's last change restarted it a minute ago
    exporter.registry = registry
    time.sleep(1.5)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    started.remove("filebeat")  # the operator stops it
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    start_s = time.time()
    _scraped_after(telemetry, "pipetune_records_total", start_s + 1.5)  # still down a second into the window
    started.labels("filebeat").set(time.time())  # and starts it again
    records.inc(10)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    found = telemetry.window(start_s, time.time()).disturbance
    assert found is not None and str(found) == "restarted outside pipetune: filebeat started 1 time in the window"
    start_s = time.time()  # the window after: the same process throughout, nothing started
    _scraped_after(telemetry, "pipetune_records_total", start_s + 2.5)
    records.inc(10)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    # read afresh: the telemetry above excuses nothing in the window after one it found restarted
    assert PrometheusTelemetry(telemetry.url).window(start_s, time.time()).disturbance is None


def test_a_window_without_the_agents_sources_is_telemetry_missing_naming_them(prometheus):
    exporter, telemetry = prometheus

    def fill(registry: CollectorRegistry):
        records = Counter("pipetune_records", "", registry=registry)
        return lambda: records.inc(10)

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    with pytest.raises(TelemetryMissing, match="pipetune_source_events_total"):
        telemetry.window(end_s - 1, end_s)


def _unscraped(exporter: Exporter, telemetry: PrometheusTelemetry) -> None:
    """Make the exporter answer 503 until Prometheus records it down."""
    exporter.down = True
    deadline = time.monotonic() + 60
    while not _scalar(telemetry, "up") == 0:
        assert time.monotonic() < deadline, "Prometheus did not record the exporter down within 60 s"
        time.sleep(0.2)


def test_a_probe_missed_by_scrapes_loses_nothing_but_a_restarted_one_is_telemetry_missing(prometheus):
    """A probe Prometheus could not scrape for a while kept counting: the window is read whole. A probe killed
    and restarted mid-window counted nothing while it was down: that window is not judged."""
    exporter, telemetry = prometheus
    counting = []

    def fill(registry: CollectorRegistry):
        records = Counter("pipetune_records", "", registry=registry)
        events = Counter("pipetune_events", "", registry=registry)  # a probe exports both
        _sources(registry, 0, 0)
        counting.append(lambda: (records.inc(10), events.inc(10)))
        return counting[-1]

    start_s, _ = _window(exporter, telemetry, fill, "pipetune_records_total")
    _unscraped(exporter, telemetry)
    counting[0]()  # counted while nobody looked
    exporter.down = False
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    assert telemetry.window(start_s, time.time()).events_out == pytest.approx(20, rel=0.3)

    _unscraped(exporter, telemetry)
    restarted = CollectorRegistry()
    fill(restarted)()  # a new process: its counters start again from zero
    exporter.registry = restarted
    exporter.down = False
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    with pytest.raises(TelemetryMissing, match="restarted in the window or not scraped at its end"):
        telemetry.window(start_s, time.time())


def test_a_pools_window_holds_only_its_own_nodes(prometheus):
    """Two pools in one deployment: each pool's learner is judged on its nodes' latency and events alone."""
    exporter, telemetry = prometheus
    # Node names no other test uses (see `_window`); `pool-aX1` would match `pool-a.1` were the dot not escaped.
    pool_a, pool_b = ("pool-a.1", "pool-a-2"), ("pool-b-1",)
    # node: (latency s, events appended, records consumed, bytes an event, backlog bytes); pool-c-1's
    # records are not counted by node (a probe from before records by node)
    figures = {"pool-a.1": (0.008, 200, 100, 100, 1_000), "pool-a-2": (0.008, 200, 100, 100, 2_000),
               "pool-b-1": (0.3, 100, 100, 50, 500), "pool-aX1": (4.0, 1_000, 1_000, 10, 0),
               "pool-c-1": (None, 100, 0, 50, 0)}

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage", "source", "node"], buckets=BUCKETS,
                            registry=registry)
        records = Counter("pipetune_records", "", registry=registry)
        node_records = Counter("pipetune_node_records", "", ["node"], registry=registry)
        labels = ["path", "node"]
        appended = Counter("pipetune_source_events", "", labels, registry=registry)
        appended_bytes = Counter("pipetune_source_bytes", "", labels, registry=registry)
        backlog = Gauge("pipetune_source_backlog_bytes", "", labels, registry=registry)
        for node, (seconds, *_) in figures.items():
            if seconds is not None:
                latency.labels(stage="e2e", source="event_time", node=node)
                node_records.labels(node=node).inc(0)
            appended.labels(path="/var/log/app.log", node=node).inc(0)
            appended_bytes.labels(path="/var/log/app.log", node=node).inc(0)

        def counters() -> None:
            for node, (seconds, events, consumed, event_bytes, unshipped) in figures.items():
                if seconds is not None:
                    for _ in range(consumed):
                        latency.labels(stage="e2e", source="event_time", node=node).observe(seconds)
                    node_records.labels(node=node).inc(consumed)
                records.inc(consumed)
                appended.labels(path="/var/log/app.log", node=node).inc(events)
                appended_bytes.labels(path="/var/log/app.log", node=node).inc(events * event_bytes)
                backlog.labels(path="/var/log/app.log", node=node).set(unshipped)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    a = PrometheusTelemetry(telemetry.url, nodes=pool_a).window(start_s, end_s)
    b = PrometheusTelemetry(telemetry.url, nodes=pool_b).window(start_s, end_s)
    everything = telemetry.window(start_s, end_s)
    assert 0.005 < a.p95_s <= 0.01 and 0.1 < b.p95_s <= 0.5 and everything.p95_s > 2.0
    # Every series was scraped at the same moments: increase() extrapolates them all alike.
    assert a.throughput_ratio == pytest.approx(0.5, rel=0.01) and b.throughput_ratio == pytest.approx(1.0, rel=0.01)
    assert a.events_in == pytest.approx(4 * b.events_in, rel=0.02)
    assert a.events_out == pytest.approx(2 * b.events_out, rel=0.02)
    assert everything.events_in == pytest.approx(16 * b.events_in, rel=0.02)
    assert everything.events_out == pytest.approx(13 * b.events_out, rel=0.02)  # the probe's total, by no node
    assert a.backlog_events == {"source": 30} and b.backlog_events == {"source": 10}
    assert set(PrometheusTelemetry(telemetry.url, nodes=pool_a).node_histograms(start_s, end_s)) == set(pool_a)
    # a pool none of whose records the probe counted by node: nothing to judge, and the message says why
    with pytest.raises(TelemetryMissing, match="no samples of pipetune_node_records_total .* for nodes pool-c-1"):
        PrometheusTelemetry(telemetry.url, nodes=("pool-c-1",)).window(start_s, end_s)


def test_a_nodes_series_born_inside_the_window_counts_whole(prometheus):
    """The probe starts a node's latency and record series at its first event. A node whose first burst arrives
    within one scrape interval (a quiet log's first lines after Filebeat's scan) is read with every event of it,
    not as a window without events."""
    exporter, telemetry = prometheus
    node = "born-1"  # a name no other test uses: its series exist in no earlier registry

    def fill(registry: CollectorRegistry):
        latency = Histogram("pipetune_e2e_latency_seconds", "", ["stage", "source", "node"], buckets=BUCKETS,
                            registry=registry)
        records = Counter("pipetune_records", "", registry=registry)
        node_records = Counter("pipetune_node_records", "", ["node"], registry=registry)
        records.inc(0)
        _sources(registry, 0, 0, node)

        def counters() -> None:  # every series of the node is born here, between two scrapes
            for _ in range(100):
                latency.labels(stage="e2e", source="event_time", node=node).observe(0.3)
            latency.labels(stage="filebeat_read", source="event_time", node=node).observe(0.04)
            node_records.labels(node=node).inc(100)
            records.inc(100)
        return counters

    start_s, end_s = _window(exporter, telemetry, fill, "pipetune_records_total")
    pool = PrometheusTelemetry(telemetry.url, nodes=(node,))
    window = pool.window(start_s, end_s)
    assert 0.2 < window.p50_s <= window.p95_s <= 0.5
    assert window.mean_s == pytest.approx(0.3) and window.stage_p95_s["filebeat_read"] <= 0.05
    assert window.events_out == 100
    assert sum(pool.node_histograms(start_s, end_s)[node].counts) == 100
    # a window that starts after the node's series were born reads only what they gained inside it
    later = time.time()
    _scraped_after(telemetry, "pipetune_records_total", later + 0.5)
    _scraped_after(telemetry, "pipetune_records_total", time.time())
    assert pool.window(later, time.time()).events_out == 0


def test_a_pools_nodes_are_names_a_deployment_allows():
    with pytest.raises(ValueError, match="nodes: .*letters, digits"):
        PrometheusTelemetry("http://127.0.0.1:9", nodes=('edge"1',))
    with pytest.raises(ValueError, match="nodes: "):
        PrometheusTelemetry("http://127.0.0.1:9", nodes=())
