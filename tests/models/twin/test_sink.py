"""The sinks' waiting-record bookkeeping: observations pinned to the values the twin gave before it
kept appended records as sorted segments (when it scanned the stamp arrays on every append and fetch).

Each case runs 3 s of seeded Poisson load plus 2 s of drain; the recorded figures are exact, so any
change to which records a fetch or micro-batch takes, or when, moves them.
"""

from __future__ import annotations

import numpy as np
import pytest

from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import Twin, load

# the learner's small-batch filebeat-kafka config: every event its own flush buffer and request
SMALL = {"filebeat.queue.mem.flush.min_events": 2, "filebeat.queue.mem.flush.timeout": 1.6e-5,
         "filebeat.backoff": 0.001, "filebeat.max_backoff": 0.008}

CASES = {
    # consumer answering each fetch at its first record
    "small-batches": (SMALL, "defaults", "local-filebeat-kafka", 3000,
                      (0.003120879554128153, 0.002391163069110025, 0.0024399191706023855, 9091),
                      0.0006225267720510957),
    # consumer waiting for 100 records per fetch (fetch.min.bytes 80000 at 800 bytes a record)
    "fetch-min-bytes": ({**SMALL, "kafka.consumer.fetch.min.bytes": 80000}, "defaults", "local-filebeat-kafka", 3000,
                        (0.03902956841021893, 0.023012860438105243, 0.0244766821654757, 9091),
                        0.022645819303204334),
    # Spark micro-batches fed by Logstash's producer, several produce requests per worker batch
    "paper-hybrid": ({}, "hybrid", "paper-2vcpu", 300,
                     (3.4384932408662485, 2.7693244640205186, 2.7758768538976484, 642), 1.4913154789401508),
}


@pytest.mark.parametrize("case", CASES)
def test_the_sinks_deliver_exactly_what_the_stamp_scan_did(case: str) -> None:
    changes, base, calibration, rate_eps, (p95_s, p50_s, mean_s, events_out), sink_wait_s = CASES[case]
    rng = np.random.default_rng(5)
    arrivals = np.sort(rng.uniform(0.0, 3.0, rng.poisson(rate_eps * 3.0)))
    twin = Twin(PIPELINE_SPACE.config(changes, base=preset(base)), arrivals, load(calibration), seed=2, multiline=True)
    twin.run_until(5.0)
    got = twin.observe(0.0, 5.0)
    assert got.events_out == events_out
    assert (got.p95_s, got.p50_s, got.mean_s) == pytest.approx((p95_s, p50_s, mean_s), rel=1e-9)
    assert got.stage_mean_s["kafka->sink"] == pytest.approx(sink_wait_s, rel=1e-9)
