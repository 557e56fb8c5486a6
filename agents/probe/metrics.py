"""The probe's Prometheus metrics, on a registry of their own so several probes can share a process.

The contract telemetry reads (names as exported; counters carry Prometheus' `_total`):

- `pipetune_e2e_latency_seconds{stage, source, node}` histogram (`LATENCY_BUCKETS_S`: 123 bounds, 1 ms-120 s).
  `source` is `event_time` (the line's own write time, read by the probe's `EventTimeSpec`: on the
  testbed the replay's `ts_nginx`, epoch seconds) or `canary` (an agent's heartbeat line,
  agents/heartbeat.py). `stage` is `e2e` (write → consumed) or a hop: `filebeat_read` (write → Filebeat's `@timestamp`),
  `filebeat_publish` (→ Kafka's record timestamp), `kafka_consume` (→ consumed); on a CreateTime topic, whose
  records carry no append time, the two after Filebeat's read are one, `filebeat_publish+kafka_consume`
  (agents/probe/events.py); where a stamp is missing the hops on both sides are one, so named. `node` is Filebeat's
  `host.name`, else `agent.name`, else "" (a heartbeat: the node its agent names). A query that sums by
  `le` must filter on `source`. Write times are corrected by the node's clock offset; with sampling
  on, one event in `pipetune_sampling_stride` is observed. A probe that falls behind (CPU-starved)
  adds its own delay: it shows in the `kafka_consume` stage and `pipetune_kafka_consumer_lag_events`.
- `pipetune_records_total`: every record consumed, parsed or not, heartbeats included.
- `pipetune_kafka_timestamp_records_total{type="log_append_time"|"create_time"|"none"}`: the same records by
  their Kafka timestamp type; only `log_append_time` gives `filebeat_publish` and `kafka_consume` apart.
- `pipetune_node_records_total{node}`: the same records by the node their latencies carry ("" for a
  record that is not a JSON event): a pool's throughput. With sampling on, the records sampled out count
  for the node of the next event observed (the batch's last, at its end): the sum over nodes is exact,
  each node's share an estimate. A node's series (and its latency series) starts at its first record:
  the daemon counts a series born inside a window whole (controller.telemetry `counted_in`), where
  `increase()` alone misses what its first scrape holds.
- `pipetune_events_total`: events with a usable event time inside the window's range (neither untimed
  nor backfill; heartbeats not included). With sampling, each observed event adds the stride.
- `pipetune_untimed_events_total`: events whose time is missing or unreadable (examples in the log).
- `pipetune_backfill_events_total{kind="past"|"future"}`: events written more than `--backfill-after-s`
  ago, or more than `--future-tolerance-s` ahead; never in the histograms.
- `pipetune_event_time_resolution_seconds`: the coarsest clock step among the last pass's events
  (1 for `time_local`, 0.001 for `$msec`); P95s below twice it cannot be judged
  (`models.event_time.below_resolution`).
- heartbeat lines: `pipetune_canary_received_total{node}`, `pipetune_canary_lost_total{node}` (a gap still
  open after `--canary-grace-s`), `pipetune_canary_duplicate_total{node}`. Loss needs all of a node's heartbeats
  in one probe: with several probe members, key the topic's partitioning by host.
- `pipetune_clock_offset_seconds{node}`: the offset (node clock − probe clock) the probe applies: 0 while the
  estimate is within its error bound (`ClockOffset.correction_s`).
- Also: `pipetune_unparsed_events_total` (records that are not JSON events), the replay ledger's
  `pipetune_duplicate_events_total`, `pipetune_late_events_total`, `pipetune_lost_events_total`, and
  `pipetune_kafka_consumer_lag_events`.
- `pipetune_probe_partitions`: the partitions this member is assigned. Several probes in one consumer
  group share the topic's partitions; their counters and histograms add up in Prometheus (every query
  above sums over instances), so a probe that cannot keep up is scaled out by starting another.
"""

from __future__ import annotations

import bisect
import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# The E24 series (ratio ~1.1) from 1 ms to 120 s: histogram_quantile interpolates linearly inside a
# bucket, and coarser buckets put the testbed's P95 off the exact figure: up to 20-30 % with the 30
# buckets of 1-1.5-2-3 s (docs/evidence/bench/measurement-run1-30-buckets.txt), 5-8 % at ~2 s with the
# E12 series (ratio ~1.2, docs/evidence/bench/measurement-merged/); both in git at 23e95b8.
_E24 = (1.0, 1.1, 1.2, 1.3, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4, 2.7, 3.0, 3.3, 3.6, 3.9, 4.3, 4.7, 5.1, 5.6, 6.2, 6.8, 7.5,
        8.2, 9.1)
LATENCY_BUCKETS_S = (*(round(m * 10.0 ** d, 4) for d in range(-3, 2) for m in _E24), 100.0, 110.0, 120.0)
EVENT_TIME, HEARTBEAT = "event_time", "canary"  # the `source` label


class LatencyHistograms(Collector):
    """`pipetune_e2e_latency_seconds{stage, source, node}`: what prometheus_client's `Histogram` exports,
    observed several stages at a time under one lock. Its per-observation locking and linear bucket
    search were a third of the probe's cost per event, and a probe that falls behind measures its own
    delay as the pipeline's."""

    NAME = "pipetune_e2e_latency_seconds"

    def __init__(self, bounds_s: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds_s = bounds_s
        self._series: dict[tuple[str, str, str], list] = {}  # labels -> [bucket counts (+Inf last), sum]
        self._lock = threading.Lock()

    def observe(self, latencies: dict[str, float], source: str, node: str) -> None:
        with self._lock:
            for stage, seconds in latencies.items():
                series = self._series.get((stage, source, node))
                if series is None:
                    series = self._series[(stage, source, node)] = [[0] * (len(self.bounds_s) + 1), 0.0]
                series[0][bisect.bisect_left(self.bounds_s, seconds)] += 1  # le: a value on a bound is in it
                series[1] += seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.NAME, "Seconds from the log write to each stamp, by stage, source and "
                                                  "node", labels=["stage", "source", "node"])
        with self._lock:
            snapshot = [(labels, list(counts), total) for labels, (counts, total) in self._series.items()]
        for labels, counts, total in sorted(snapshot):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, self.bounds_s), "+Inf"), counts):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(labels), buckets, total)
        yield family


class ProbeMetrics:
    """Latency histograms by stage, source and node; event, heartbeat and ledger counters; the lag."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.latency = LatencyHistograms()
        r.register(self.latency)
        self.records = Counter("pipetune_records", "Records consumed, parsed or not", registry=r)
        self.timestamp_types = Counter("pipetune_kafka_timestamp_records", "Records consumed by their Kafka timestamp "
                                       "type (only the broker's append time marks a hop)", ["type"], registry=r)
        self.node_records = Counter("pipetune_node_records", "Records consumed, parsed or not, by node", ["node"],
                                    registry=r)
        self.events = Counter("pipetune_events", "Events with a usable event time in the window's range",
                              registry=r)
        self.unparsed = Counter("pipetune_unparsed_events", "Records that are not JSON events", registry=r)
        self.untimed = Counter("pipetune_untimed_events", "Events with no readable event time", registry=r)
        backfill = Counter("pipetune_backfill_events", "Events too old or in the future, kept out of the histograms",
                           ["kind"], registry=r)
        self.backfill = {kind: backfill.labels(kind=kind) for kind in ("past", "future")}
        self.resolution = Gauge("pipetune_event_time_resolution_seconds",
                                "The coarsest clock step of the event times read in the last pass", registry=r)
        self.stride = Gauge("pipetune_sampling_stride", "One event in this many is observed", registry=r)
        self.stride.set(1)
        self.heartbeat_received = Counter("pipetune_canary_received", "Canaries consumed", ["node"], registry=r)
        self.heartbeat_lost = Counter("pipetune_canary_lost", "Canary sequence gaps still open after the grace",
                                      ["node"], registry=r)
        self.heartbeat_duplicate = Counter("pipetune_canary_duplicate", "Canaries whose sequence number was seen",
                                           ["node"], registry=r)
        self.clock_offset = Gauge("pipetune_clock_offset_seconds", "Node clock minus the probe's, as applied",
                                  ["node"], registry=r)
        self.duplicates = Counter("pipetune_duplicate_events", "Arrivals of an already seen request_id", registry=r)
        self.late = Counter("pipetune_late_events", "Arrivals after their run's end plus the grace period",
                            registry=r)
        self.lost = Counter("pipetune_lost_events", "Events of finished runs that never arrived", registry=r)
        self.lag = Gauge("pipetune_kafka_consumer_lag_events", "Records in the topic not yet consumed",
                         registry=r)
        self.partitions = Gauge("pipetune_probe_partitions", "Partitions of the topic this group member consumes",
                                registry=r)

    def observe(self, latencies: dict[str, float], source: str, node: str) -> None:
        self.latency.observe(latencies, source, node)
