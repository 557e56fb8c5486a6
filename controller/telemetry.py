"""Telemetry of a live pipeline, read back from Prometheus (prometheus-api-client).

What is scraped: the probe's latency histograms (`pipetune_e2e_latency_seconds{stage, source, node}`)
and the records it consumed, and each node agent's sources (`pipetune_source_*`: events appended to
the harvested files, and the bytes not yet shipped) and Filebeat counters. A window is summarised with
`increase()` over exactly the window (a series born inside it counted whole, `counted_in`), so percentiles are
those of the events that arrived in it.

The offered load is what the sources appended and the throughput what the probe consumed (measured to a Spark
table, the rows committed to it: what the `warehouse` histogram counts), with or without a replay of pipetune's
own: the daemon judges the operator's traffic as it judges the testbed's.
The backlog is the sources' unshipped events and, given a `LagWatch`, the operator's consumer group lag.
Latency is the deployment's `latency.source`: `event_time` (each event's own write time; a histogram
without a `source` label, an older probe's, is that too), `canary` (the agents' canary lines), or
`worst`, the worse of both by P95 in each window; of the deployment's `latency.stage`: `e2e` (the probe's,
to Kafka) or `warehouse` (a Spark job's, to its micro-batch committed into the table; event time only). A window
Prometheus cannot be asked about, or holds no samples of the probe or the sources for, is `TelemetryMissing`.

What a window cost: each component's CPU (`pipetune_component_cpu_seconds_total`), the busiest node's share of its
cores, Filebeat's output batches, and, where the brokers export them through the Prometheus JMX exporter
(docs/deploy.md), the cluster's Produce requests and bytes in and each broker's process CPU (`broker-<id>`); a
cluster that does not export them leaves those None. From the same exporters, whether the cluster disturbed the
window (`Observation.disturbance`, models.disturbance): a broker that missed its scrapes, leaders that moved,
partitions under-replicated or offline, with how far the consumer group's lag rose; a cluster that does not export
them is never read as disturbed. A component whose process started anew inside the window (the probe's `--cpu-of`
start times) disturbs it too: pipetune did not restart it, someone else did.

A telemetry given `nodes` (a pool's) reads only the series of those nodes: latency and the records
consumed (`pipetune_node_records_total`) by the probe's `node` label (Filebeat's `host.name`, a canary's
node), the sources, Filebeat and CPU by the `node` label every agent series carries. Kafka consumer-group
lag is per topic, not per node: it stays the deployment's (pools share the topic), and so do the replay
ledger's lost events and the brokers' figures (every pool's requests land on the same brokers). Without
`nodes`, every series counts, with or without a node, as before pools.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Literal, Mapping, Protocol, Sequence

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect

from agents.probe.metrics import LATENCY_BUCKETS_S
from controller.kafka_lag import LagUnknown, LagWatch
from controller.pipelines import PipelineUnavailable
from models.canary import LatencyHistogram
from models.disturbance import BrokerWindow, Disturbance, combined, disturbance, restart_disturbance
from models.observation import Observation

HISTOGRAM = "pipetune_e2e_latency_seconds"
# The stage whose latency the learner optimises: the probe's end to end (written -> consumed from Kafka), or, for a
# pipeline ending in a Spark job (testbed/spark_job.py), to the micro-batch committed into the table.
LATENCY_STAGES = ("e2e", "warehouse")
# A Spark job's span from Kafka's append to its batch committed (testbed/spark_job.py): the time an event spends in
# the micro-batch sink, whose rows are a warehouse window's output.
SINK_SPAN = "kafka_commit"
SERIES_RATE_WINDOW_S = 5  # per-second series are rates over this many seconds
NODE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a deployment's node names (controller.deployment.NodeSpec)
LatencySource = Literal["event_time", "canary", "worst"]
# `source=""` also matches a histogram without the label at all: the probe from before it had one.
SOURCE_MATCHERS = {"event_time": 'source=~"event_time|"', "canary": 'source="canary"'}
APPENDED = "pipetune_source_events_total"
NODE_RECORDS = "pipetune_node_records_total"
NODE_CPU_BUSY, NODE_CPUS = "pipetune_node_cpu_busy_seconds_total", "pipetune_node_cpus"  # the node agents'
# The brokers' own counts, as the Prometheus JMX exporter's rules (testbed/jmx-exporter/kafka-broker.yaml) name
# them, and each broker's process CPU (the exporter's), its target labelled `broker` with the broker's id
# (docs/deploy.md).
PRODUCE_REQUESTS = 'kafka_network_requestmetrics_requests_total{request="Produce"}'
KAFKA_BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BROKER_CPU = 'process_cpu_seconds_total{broker!=""}'
# ... and what says the cluster disturbed a window: the same targets' scrapes, each broker's count of partitions led
# and of those under-replicated (kafka.server ReplicaManager), and partitions without a leader (every KRaft
# controller's kafka.controller KafkaController count).
BROKER_UP = 'up{broker!=""}'
LEADERS = "kafka_server_replicamanager_leadercount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
# ... and what says a component restarted that pipetune did not restart: the probe's `--cpu-of` exports each named
# process's start time. pipetune's own restarts end before a window starts (an agent answers a change once the
# component is back and healthy); read from a second into the window, a scrape taken as one ended is never counted.
COMPONENT_START = "pipetune_component_start_time_seconds"
_COUNTED = ("pipetune_records_total", "pipetune_events_total", NODE_RECORDS, APPENDED)  # the probes' and agents'
# Every record the probe consumed (`increase` or `rate`); a probe from before `pipetune_records_total`
# counted them in two.
CONSUMED = ("sum({f}(pipetune_records_total[{w}])) or (sum({f}(pipetune_events_total[{w}])) "
            "+ sum({f}(pipetune_unparsed_events_total[{w}])))")
# The records of some nodes (`{s}` selects them); a probe from before records by node has none.
NODE_CONSUMED = "sum({f}(" + NODE_RECORDS + "{s}[{w}]))"


def edge_events(series: Mapping[str, Sequence[float]], interval_s: float) -> float:
    """What the window's input and output counts may misplace at its edges: a scrape interval of the largest change
    of rate across the window, input's or output's (their per-second `series`). Where the load stopped a second into
    a window (a lull), the input counted the second's 660 events and the output, scraped on another phase, 13 of
    them: at 33 ev/s offered the window read as 2 % shipped, and the incumbent that had kept up at 800 ev/s for ten
    windows was taken for overloaded and moved to the defaults (bench.foreign)."""
    moved = 0.0
    for name in ("input_eps", "output_eps"):
        rates = [v for v in series.get(name, ()) if math.isfinite(v)]
        if len(rates) >= 2:
            moved = max(moved, abs(rates[-1] - rates[0]))
    return interval_s * moved


def counted_in(series: str, w: str) -> str:
    """PromQL for what each of `series` counted in the window `w` ending at the query's time, counting whole a
    series born inside it. The probe's latency and per-node series start at their first event: `increase()`
    alone reads only what a series gained after its first scrape, and a burst that arrived within one scrape
    interval of a node's first event would read as nothing (a P95 of NaN, a throughput of 0)."""
    return f"((increase({series}[{w}]) and {series} offset {w}) or ({series} unless {series} offset {w}))"


@dataclass(frozen=True)
class Latency:
    """One latency source's figures over a window."""

    p50_s: float
    p95_s: float
    p99_s: float
    mean_s: float
    stage_p95_s: dict[str, float]
    stage_mean_s: dict[str, float]
    p95_series_s: list[float]
    events: float  # how many events the window's percentiles are of (NaN: the stage has no series yet)


class TelemetryMissing(PipelineUnavailable):
    """The telemetry cannot be read, or holds nothing of the pipeline, for a window."""


class TelemetrySource(Protocol):
    latency_stage: str  # where the latency is measured to: "e2e" (the consumer) or "warehouse" (a Spark table)

    def window(self, start: float, end: float) -> Observation:
        """The window [start, end] summarised; `TelemetryMissing` when it cannot be."""
        ...

    def close(self) -> None:
        """Stop what it runs in the background (nothing, for most)."""
        ...


class PrometheusTelemetry:
    """A `TelemetrySource` over the Prometheus that scrapes the probe and the node agents."""

    def __init__(self, url: str, latency_source: LatencySource = "event_time", kafka_lag: LagWatch | None = None,
                 nodes: tuple[str, ...] | None = None, latency_stage: str = "e2e") -> None:
        if latency_source not in (*SOURCE_MATCHERS, "worst"):
            raise ValueError(f"latency source must be event_time, canary or worst, got {latency_source!r}")
        if latency_stage not in LATENCY_STAGES:
            raise ValueError(f"latency stage must be {' or '.join(LATENCY_STAGES)}, got {latency_stage!r}")
        if latency_stage != "e2e" and latency_source != "event_time":
            raise ValueError(f"latency stage {latency_stage}: only events reach the table, so the latency source must "
                             f"be event_time, got {latency_source!r}")
        if nodes is not None and (not nodes or not all(NODE_NAME.fullmatch(n) for n in nodes)):
            raise ValueError(f"nodes: a telemetry scoped to nodes needs at least one name of 1-64 letters, digits, "
                             f"'_', '.' or '-', got {nodes!r}")
        self.url = url
        self.latency_source = latency_source
        self.latency_stage = latency_stage
        self.kafka_lag = kafka_lag
        self.nodes = nodes
        self._restarted_before = False  # the last window read had a component restart in it
        # a PromQL regex (RE2, anchored at both ends) in a PromQL string: a name's dots escaped, the `\\` one `\`
        self._node = "" if nodes is None else 'node=~"{}"'.format("|".join(n.replace(".", r"\\.") for n in nodes))
        self.client = PrometheusConnect(url=url, disable_ssl=True)

    def _sel(self, *matchers: str) -> str:
        """A series selector of `matchers` and, when scoped, the node matcher ("" when there is neither)."""
        parts = [m for m in (*matchers, self._node) if m]
        return "{" + ", ".join(parts) + "}" if parts else ""

    def _consumed(self, function: str, w: str) -> str:
        """The records the probe consumed, of the telemetry's nodes when scoped, as `function` over `w`."""
        if self.nodes is None:
            return CONSUMED.format(f=function, w=w)
        if function == "increase":
            return f"sum({counted_in(NODE_RECORDS + self._sel(), w)})"
        return NODE_CONSUMED.format(f=function, s=self._sel(), w=w)

    def _table_sel(self) -> str:
        """The selector of the latency stage's histogram of events (the `warehouse` stage's: rows in the table)."""
        return self._sel(f'stage="{self.latency_stage}"', SOURCE_MATCHERS["event_time"])

    def _of(self) -> str:
        """` for nodes a, b` when scoped, for messages."""
        return f" for nodes {', '.join(self.nodes)}" if self.nodes else ""

    def _ask(self, query: Callable[[], list]) -> list:
        try:
            return query()
        except (requests.RequestException, PrometheusApiClientException) as err:
            raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): {err}") from err

    def scalar(self, query: str, at: float) -> float:
        """The query's single value at epoch second `at` (NaN when Prometheus has none)."""
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{at:.3f}"}))
        return float(result[0]["value"][1]) if result else math.nan

    def by_label(self, query: str, label: str, at: float) -> dict[str, float]:
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{at:.3f}"}))
        return {row["metric"].get(label, ""): float(row["value"][1]) for row in result}

    def node_histograms(self, start: float, end: float) -> dict[str, LatencyHistogram]:
        """Each node's end-to-end latencies over [start, end] (the event-time source unless the deployment
        optimises canaries), as non-cumulative bucket counts; the canary rollout judges nodes on them."""
        source = "canary" if self.latency_source == "canary" else "event_time"
        w = f"{max(round(end - start), 1)}s"
        of = self._sel(f'stage="{self.latency_stage}"', SOURCE_MATCHERS[source])
        query = f"sum by (node, le) ({counted_in(HISTOGRAM + '_bucket' + of, w)})"
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{end:.3f}"}))
        cumulative: dict[str, dict[float, float]] = {}
        for row in result:
            cumulative.setdefault(row["metric"].get("node", ""), {})[float(row["metric"]["le"])] = float(row["value"][1])
        histograms = {}
        for node, by_bound in cumulative.items():
            bounds = sorted(by_bound)
            # increase() extrapolates to the window's edges: counts come back fractional, and rounding can
            # leave a bucket a hair below the one before it
            running = [round(by_bound[b]) for b in bounds]
            counts = [max(b - a, 0) for a, b in zip([0, *running], running)]
            histograms[node] = LatencyHistogram(tuple(bounds), tuple(counts))
        return histograms

    def series(self, query: str, start: float, end: float) -> list[float]:
        """The query's values at every second of [start, end] (NaN where missing)."""
        rows = self._ask(lambda: self.client.custom_query_range(query, start_time=_dt(start), end_time=_dt(end),
                                                                 step="1s"))
        values = {round(float(t)): float(v) for t, v in rows[0]["values"]} if rows else {}
        return [values.get(t, math.nan) for t in range(math.ceil(start), math.floor(end) + 1)]

    def _down(self, at: float) -> str:
        """The targets Prometheus failed to scrape at `at`, as a clause, or ""."""
        down = self._targets("up == 0", at)
        return f"; not scraped: {', '.join(down)}" if down else ""

    def _gaps(self, w: str, at: float) -> list[str]:
        """The probe and agent targets whose counts miss part of the window ending at `at`: one that restarted
        in it (its counters reset: what it counted after its last scrape went with it) or that Prometheus does
        not reach at its end. One that missed a scrape or two and runs on loses nothing: it kept counting."""
        # one function per metric: a target exports several of them, and one call over all would hold series
        # that differ only by their dropped names, which Prometheus refuses
        of = self._sel()
        restarted = " or ".join(f"max by (job, instance) (resets({name}{of}[{w}])) > 0" for name in _COUNTED)
        counted = " or ".join(f"max_over_time({name}{of}[{w}])" for name in _COUNTED)
        return self._targets(f"(up and on (job, instance) ({restarted})) or "
                             f"((up == 0) and on (job, instance) ({counted}))", at)

    def _targets(self, query: str, at: float) -> list[str]:
        """`job instance (node N)` of each series `query` returns."""
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{at:.3f}"}))
        return sorted(" ".join(filter(None, (row["metric"].get("job"), row["metric"].get("instance"),
                                             f"(node {row['metric']['node']})" if "node" in row["metric"] else "")))
                      for row in result)

    def latency(self, source: str, start: float, end: float) -> Latency:
        """The e2e percentiles, mean, per-stage P95 and mean, and per-second P95 of one latency source."""
        w = f"{max(round(end - start), 1)}s"
        e2e_of = self._sel(f'stage="{self.latency_stage}"', SOURCE_MATCHERS[source])
        hops = self._sel(f'stage!~"e2e|{self.latency_stage}"', SOURCE_MATCHERS[source])
        e2e = f"sum by (le) ({counted_in(HISTOGRAM + '_bucket' + e2e_of, w)})"
        quantile = {q: self.scalar(f"histogram_quantile({q}, {e2e})", end) for q in (0.5, 0.95, 0.99)}
        count = self.scalar(f"sum({counted_in(HISTOGRAM + '_count' + e2e_of, w)})", end)
        total = self.scalar(f"sum({counted_in(HISTOGRAM + '_sum' + e2e_of, w)})", end)
        stages = f"sum by (le, stage) ({counted_in(HISTOGRAM + '_bucket' + hops, w)})"
        stage_p95 = self.by_label(f"histogram_quantile(0.95, {stages})", "stage", end)
        stage_mean = self.by_label(f"sum by (stage) ({counted_in(HISTOGRAM + '_sum' + hops, w)}) / "
                                   f"sum by (stage) ({counted_in(HISTOGRAM + '_count' + hops, w)})", "stage", end)
        rate = f"[{SERIES_RATE_WINDOW_S}s]"
        series = self.series(f'histogram_quantile(0.95, sum by (le) (rate({HISTOGRAM}_bucket{e2e_of}{rate})))',
                             start, end)
        return Latency(quantile[0.5], quantile[0.95], quantile[0.99], total / count if count > 0 else math.nan,
                       stage_p95, stage_mean, series, count)

    def _latency(self, start: float, end: float) -> Latency:
        if self.latency_source != "worst":
            return self.latency(self.latency_source, start, end)
        both = [self.latency(source, start, end) for source in SOURCE_MATCHERS]
        # A source with no events in the window (NaN) does not hide the other one.
        return max(both, key=lambda figures: figures.p95_s if math.isfinite(figures.p95_s) else -math.inf)

    def window(self, start: float, end: float) -> Observation:
        """Latency percentiles, rates, backlog, CPU and request rate over [start, end]."""
        w = f"{max(round(end - start), 1)}s"
        seconds = max(end - start, 1e-9)
        # Both are counters from the start of their exporter: no sample of one means that part is not scraped.
        of = self._sel()
        appended = self.scalar(f"sum(increase({APPENDED}{of}[{w}]))", end)
        consumed = self.scalar(self._consumed("increase", w), end)
        for value, what in ((appended, f"{APPENDED} (the node agents' /metrics)"),
                            (consumed, f"{NODE_RECORDS} (the probe's, by node)" if self.nodes else
                                       "pipetune_records_total or pipetune_events_total (the probe)")):
            if math.isnan(value):
                raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): no samples of {what}{self._of()} in "
                                       f"the window{self._down(end)}")
        gaps = self._gaps(w, end)
        if gaps:
            raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): {', '.join(gaps)} restarted in the window "
                                   f"or not scraped at its end: its counts miss part of it, nothing to judge")
        latency = self._latency(start, end)
        sink_held = 0.0
        if self.latency_stage == "warehouse":
            # What the pipeline carried is what reached the table. The probe consumes the topic, before the Spark job:
            # counted there, a job that fell behind read as keeping up (a batch limit of 7 records at 485 ev/s kept
            # out/in at 100 % while the P95 went to 49 s).
            consumed = latency.events
            if math.isnan(consumed):
                raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): no samples of {HISTOGRAM}_count"
                                       f'{{stage="warehouse"}} (the Spark job\'s /metrics){self._of()} in the window: '
                                       f"nothing committed to the table yet{self._down(end)}")
            # Its rows come a batch at a time: what the job holds (Little's law) a window's end may cut off
            sink_held = appended / seconds * _num(latency.stage_mean_s.get(SINK_SPAN, latency.mean_s))
        # Every latency is read from the probe's histograms, whose first bucket is a millisecond wide (canaries are
        # stamped in ms too); the pipeline's own event times may be coarser, as coarse as 1 s.
        clock_s = 0.0 if self.latency_source == "canary" else \
            _num(self.scalar("max(pipetune_event_time_resolution_seconds)", end))
        resolution_s = max(clock_s, LATENCY_BUCKETS_S[0])
        # The replay's ledger knows runs, not nodes: its losses count in every pool's window.
        lost = _num(self.scalar(f"sum(increase(pipetune_lost_events_total[{w}]))", end)) + \
            _num(self.scalar(f"sum(increase(pipetune_canary_lost_total{of}[{w}]))", end))
        batches = self.scalar(f"sum(increase(pipetune_filebeat_output_batches_total{of}[{w}]))", end)
        bytes_per_event = self.scalar(f"sum(pipetune_source_bytes_total{of}) / sum({APPENDED}{of})", end)
        backlog = {"source": self.scalar(f"sum(pipetune_source_backlog_bytes{of})", end) / bytes_per_event}
        brokers, offline = self._cluster(w, start, end)  # the cluster's, whatever the pool
        lag_rise = math.nan
        if self.kafka_lag is not None:
            try:
                backlog["kafka"] = self.kafka_lag.lag_events(start, end)  # the topic's: every pool's
            except LagUnknown:
                if disturbance(brokers, offline) is None:  # a failover holds up the group's coordinator too
                    raise
            lag_rise = self.kafka_lag.rise_events(start, end)
        cpu = self.by_label(f"sum by (component) (rate(pipetune_component_cpu_seconds_total{of}[{w}]))",
                            "component", end)
        # the probe's own process: the target that exports its record counts
        cpu["probe"] = self.scalar(f"sum(rate(process_cpu_seconds_total[{w}]) and on (job, instance) "
                                   f"(pipetune_records_total or pipetune_events_total))", end)
        cpu |= {f"broker-{b}": v for b, v in self.by_label(f"sum by (broker) (rate({BROKER_CPU}[{w}]))", "broker",
                                                           end).items()}
        # the cluster's, whatever the pool
        produce = self.scalar(f"sum(increase({PRODUCE_REQUESTS}[{w}]))", end)
        bytes_in = self.scalar(f"sum(increase({KAFKA_BYTES_IN}[{w}]))", end)
        busiest = self.scalar(f"max(rate({NODE_CPU_BUSY}{of}[{w}]) / {NODE_CPUS}{of})", end)
        rate = f"{SERIES_RATE_WINDOW_S}s"
        series = {
            "t_s": [float(t) for t in range(math.ceil(start), math.floor(end) + 1)],
            "input_eps": self.series(f"sum(rate({APPENDED}{of}[{rate}]))", start, end),
            "output_eps": self.series(f"sum(rate({HISTOGRAM}_count{self._table_sel()}[{rate}]))"
                                      if self.latency_stage == "warehouse" else self._consumed("rate", rate),
                                      start, end),
            "p95_s": latency.p95_series_s,
        }
        # the input's and the probe's targets, each on its own scrape phase: the larger interval of the two
        samples = self.scalar(f"min(count_over_time({APPENDED}{of}[{w}]) or "
                              f"count_over_time(pipetune_records_total[{w}]))", end)
        interval_s = seconds / samples if math.isfinite(samples) and samples > 0 else 0.0
        return Observation(
            duration_s=end - start, offered_eps=appended / seconds, throughput_eps=consumed / seconds,
            p50_s=latency.p50_s, p95_s=latency.p95_s, p99_s=latency.p99_s, mean_s=latency.mean_s,
            events_in=round(appended), events_out=round(consumed), lost_events=round(lost),
            packets_per_s=_num(batches) / seconds, stage_p95_s=latency.stage_p95_s,
            stage_mean_s=latency.stage_mean_s,
            backlog_events={k: round(v) for k, v in backlog.items() if math.isfinite(v)},
            cpu_cores={k: v for k, v in cpu.items() if math.isfinite(v)},
            busiest_cpu_share=busiest if math.isfinite(busiest) else None,
            produce_requests_per_s=produce / seconds if math.isfinite(produce) else None,
            kafka_bytes_in_per_s=bytes_in / seconds if math.isfinite(bytes_in) else None, series=series,
            latency_resolution_s=resolution_s,
            disturbance=combined(disturbance(brokers, offline, lag_rise), self._restarts(start, end)),
            sink_held_events=sink_held, edge_events=edge_events(series, interval_s),
        )

    def _restarts(self, start: float, end: float) -> Disturbance | None:
        """Components whose process started anew inside the window, from a second after it began (`COMPONENT_START`);
        not in the window after one that had such a restart: a component that restarts window after window crashes,
        and a config that makes it crash is the config's to answer for (the verdict rolls it back)."""
        inside = f"{max(math.floor(end - start) - 1, 1)}s"
        started = f"{COMPONENT_START}{self._sel()}"
        changed = self.by_label(f"sum by (component) (changes({started}[{inside}]))", "component", end)
        # An operator's restart stops the process first: stopped as the window began, its series has a gap there and
        # only the new start time inside, no change (bench.foreign: the hand edit's restart read as none). Its first
        # start time inside differs from the last before, whenever that was.
        anew = self.by_label(f"sum by (component) (min_over_time({started}[{inside}]) != bool "
                             f"last_over_time({started}[1h] offset {inside}))", "component", end)
        starts = {name: n + anew.get(name, 0.0) for name, n in changed.items()}
        found = restart_disturbance({name: round(n) for name, n in starts.items() if math.isfinite(n)})
        excused = None if self._restarted_before else found
        self._restarted_before = found is not None
        return excused

    def _cluster(self, w: str, start: float, end: float) -> tuple[dict[str, BrokerWindow], int]:
        """Each broker's figures over the window (by broker id; none where the brokers do not export them), and the
        most partitions without a leader the controllers counted in it."""
        missed = self.by_label(f"sum by (broker) (count_over_time({BROKER_UP}[{w}]) - sum_over_time({BROKER_UP}[{w}]))",
                               "broker", end)
        changes = self.by_label(f"sum by (broker) (changes({LEADERS}[{w}]))", "broker", end)
        led_from = self.by_label(f"sum by (broker) ({LEADERS})", "broker", start)
        led_to = self.by_label(f"sum by (broker) (last_over_time({LEADERS}[{w}]))", "broker", end)
        lagging = self.by_label(f"sum by (broker) (max_over_time({UNDER_REPLICATED}[{w}]))", "broker", end)
        brokers = {b: BrokerWindow(round(_num(missed.get(b, 0.0))), round(_num(changes.get(b, 0.0))),
                                   led_from.get(b, math.nan), led_to.get(b, math.nan),
                                   round(_num(lagging.get(b, 0.0))))
                   for b in {*missed, *changes, *led_to, *lagging}}
        return brokers, round(_num(self.scalar(f"max(max_over_time({OFFLINE}[{w}]))", end)))

    def close(self) -> None:
        if self.kafka_lag is not None:
            self.kafka_lag.close()


def _num(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)
