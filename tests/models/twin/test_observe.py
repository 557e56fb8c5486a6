"""What a twin window says Kafka took in: one Produce request per batch its producer sent, and the bytes of its
events at the calibration's size."""

from __future__ import annotations

import numpy as np
import pytest

from models.twin.core import Stamps
from models.twin.observe import produced
from tests.models.twin.helpers import CAL, config, poisson, run


def test_each_run_of_events_appended_at_one_time_is_one_request_counted_in_the_window_it_lands():
    stamps = Stamps.empty(np.arange(8, dtype=float) * 0.1)
    stamps.kafka[:] = [1.0, 1.0, 1.0, 2.5, 2.5, 2.7, 3.1, np.inf]  # three requests in [1, 3), one after, one waiting
    assert produced(stamps, 1.0, 3.0) == (3, 6)
    assert produced(stamps, 3.0, 4.0) == (1, 1)


def test_kafka_takes_a_request_per_event_from_zero_wait_and_batches_from_the_baseline():
    cal = CAL.scaled(topology="filebeat-kafka")
    arrivals = poisson(200, 40)
    eager = run(config("zero-wait"), arrivals, 40.0, cal=cal).observe(10.0, 30.0)
    batched = run(config("baseline"), arrivals, 40.0, cal=cal).observe(10.0, 30.0)
    for window in (eager, batched):
        assert window.kafka_bytes_in_per_s == pytest.approx(cal.event_bytes * 200, rel=0.15)
    assert eager.produce_requests_per_s == pytest.approx(eager.kafka_bytes_in_per_s / cal.event_bytes)
    assert batched.produce_requests_per_s < eager.produce_requests_per_s / 10
