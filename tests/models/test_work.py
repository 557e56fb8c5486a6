"""models/work.py: what a config makes a component do each second."""

import numpy as np
import pytest

from models.components import FILEBEAT, KAFKA_CONSUMER
from models.work import SHORTEST_S, work_names, work_rates


def _filebeat(**values) -> dict[str, np.ndarray]:
    base = {"filebeat.backoff": 1.0, "filebeat.max_backoff": 10.0, "filebeat.scan_frequency": 10.0,
            "filebeat.queue.mem.flush.timeout": 1.0, "filebeat.queue.mem.flush.min_events": 2048}
    return {name: np.atleast_1d(np.asarray(values.get(name.split(".")[-1].replace(".", "_"), value), dtype=float))
            for name, value in base.items()}


def _rates(offered_eps, **values) -> dict[str, float]:
    given = _filebeat(**values)
    return dict(zip(work_names(FILEBEAT), work_rates(FILEBEAT, given.__getitem__, offered_eps)[0]))


def test_filebeats_work_is_its_events_its_polls_its_flushes_and_its_scans():
    assert work_names(FILEBEAT) == ("events", "filebeat.backoff", "filebeat.queue.mem.flush.timeout",
                                    "filebeat.max_backoff", "filebeat.scan_frequency")
    rates = _rates(100.0)  # the defaults at 100 ev/s: a flush a second (100 events, below min_events)
    assert rates == pytest.approx({"events": 100.0, "filebeat.backoff": 1.0, "filebeat.queue.mem.flush.timeout": 1.0,
                                   "filebeat.max_backoff": 0.1, "filebeat.scan_frequency": 0.1})


def test_a_flush_timer_fires_once_per_batch_which_the_threshold_or_the_timeout_ends_and_holds_an_event_at_least():
    # zoo 4034208113, 6,627 ev/s: 5 ms flushes 200 times a second (33 events each), 0.1 ms once per event
    flushes = lambda **v: _rates(6627.0, **v)["filebeat.queue.mem.flush.timeout"]  # noqa: E731
    assert flushes(timeout=0.005, min_events=4096) == pytest.approx(200.0)
    assert flushes(timeout=0.0001, min_events=4096) == pytest.approx(6627.0)
    assert flushes(timeout=1.0, min_events=2048) == pytest.approx(6627.0 / 2048)  # the threshold fills first
    assert flushes(timeout=1.0, min_events=0) == pytest.approx(6627.0)  # no waiting: every event goes


def test_a_timer_at_zero_runs_at_the_shortest_interval_and_a_byte_threshold_counts_in_events():
    assert _rates(10.0, backoff=0.0)["filebeat.backoff"] == pytest.approx(1.0 / SHORTEST_S)
    values = {"kafka.consumer.fetch.max.wait.ms": np.array([500.0, 500.0]),
              "kafka.consumer.fetch.min.bytes": np.array([1.0, 80_000.0])}
    fetches = work_rates(KAFKA_CONSUMER, values.__getitem__, np.array([300.0, 300.0]))[:, 1]
    assert fetches == pytest.approx([300.0, 3.0])  # a byte fills a fetch with one event; 100 events' bytes wait
