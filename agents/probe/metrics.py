"""The probe's Prometheus metrics, on a registry of their own so several probes can share a process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agents.probe.events import E2E, STAGES

# Fine enough between 5 ms and 2 s for histogram_quantile's interpolation to resolve what tuning moves.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                     0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)


class ProbeMetrics:
    """Latency histograms by stage, event counters and the consumer's lag."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        latency = Histogram("pipetune_e2e_latency_seconds", "Seconds from the log write to each stamp, by stage",
                            ["stage"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.latency = {stage: latency.labels(stage=stage) for stage in (E2E, *STAGES)}
        self.events = Counter("pipetune_events", "Events consumed and parsed", registry=r)
        self.unparsed = Counter("pipetune_unparsed_events", "Records that are not replayed events", registry=r)
        self.duplicates = Counter("pipetune_duplicate_events", "Arrivals of an already seen request_id", registry=r)
        self.late = Counter("pipetune_late_events", "Arrivals after their run's end plus the grace period",
                            registry=r)
        self.lost = Counter("pipetune_lost_events", "Events of finished runs that never arrived", registry=r)
        self.lag = Gauge("pipetune_kafka_consumer_lag_events", "Records in the topic not yet consumed",
                         registry=r)

    def observe(self, latencies: dict[str, float]) -> None:
        for stage, seconds in latencies.items():
            self.latency[stage].observe(seconds)
