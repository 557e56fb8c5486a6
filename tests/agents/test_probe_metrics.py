"""The probe's latency histograms export exactly what prometheus_client's `Histogram` would."""

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from agents.probe.metrics import LATENCY_BUCKETS_S, ProbeMetrics


def _series(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if line.startswith("pipetune_e2e_latency_seconds") and "_created" not in line)


def test_same_exposition_as_the_library_histogram_bounds_included():
    ours = ProbeMetrics()
    reference = CollectorRegistry()
    library = Histogram("pipetune_e2e_latency_seconds", "x", ["stage", "source", "node"], buckets=LATENCY_BUCKETS_S,
                        registry=reference)
    rng = random.Random(1)
    for k in range(3000):
        # Values on bucket bounds, beyond the last bound, and between: the `le` edges must agree.
        latencies = {"e2e": rng.expovariate(1 / 0.3), "kafka_consume": rng.choice([0.001, 0.0025, 0.5, 200.0])}
        node = ("web-1", "")[k % 2]
        ours.observe(latencies, "event_time" if k % 3 else "canary", node)
        for stage, seconds in latencies.items():
            library.labels(stage=stage, source="event_time" if k % 3 else "canary", node=node).observe(seconds)
    assert _series(ours.registry) == _series(reference)
    assert len(_series(reference)) > 100
