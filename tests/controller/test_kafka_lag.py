"""The operator's consumer group lag through Kafka's admin API (a real broker: the session testbed's), and
the floor a window reads of the saw-tooth a committing group draws."""

from __future__ import annotations

import math
import secrets
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from controller.kafka_lag import (GroupLag, LagSample, LagUnknown, LagWatch, close_open_watches, lag_floor,
                                  lag_rise)


def test_the_floor_is_the_smallest_lag_in_the_last_span_of_the_window():
    samples = [LagSample(t, committed, 1000) for t, committed in
               [(100, 0), (104, 990), (106, 700), (108, 980), (110, 900), (111, 960)]]
    assert lag_floor(samples, 100, 110, span_s=10) == 10  # 1000 - 990, at 104
    assert lag_floor(samples, 100, 110, span_s=4) == 20  # only 106..110: 1000 - 980
    assert lag_floor(samples, 107, 110, span_s=10) == 20  # a window shorter than the span: the window
    assert lag_floor(samples, 120, 130, span_s=10) != lag_floor(samples, 120, 130, span_s=10)  # none: NaN


def _committing(lags: list[int]) -> list[LagSample]:
    """One sample a second from 0 with these lags."""
    return [LagSample(i, 10_000 - lag, 10_000) for i, lag in enumerate(lags)]


def test_the_lag_rise_is_its_floors_not_a_commit_intervals_saw_tooth():
    saw_tooth = _committing([0, 50, 100, 150, 200] * 6)  # a group that keeps up, committing every 5 s
    assert lag_rise(saw_tooth, 10, 29, span_s=10) == 0
    stalled = _committing([0, 50, 100, 150, 200] * 2 + [250 + 50 * i for i in range(20)])  # commits stop at 10 s
    # the floor at 29 (the lag at 19, 700: a lag held high for a whole span) over the floor as the window began (0)
    assert lag_rise(stalled, 10, 29, span_s=10) == 700
    assert lag_rise(stalled, 29, 29, span_s=10) == 0  # one sample: nothing to rise from
    assert math.isnan(lag_rise(stalled, 40, 50, span_s=10))  # no sample in the window


class Scripted:
    """A `LagReader` that returns its samples in turn, then raises (as Kafka going away would)."""

    def __init__(self, samples: list[LagSample]) -> None:
        self.samples = samples
        self.taken = 0
        self.asked = 0
        self.closed = False

    def sample(self) -> LagSample:
        self.asked += 1
        if self.taken >= len(self.samples):
            raise LagUnknown("consumer group 'g': lag not readable (broker down)")
        self.taken += 1
        return self.samples[self.taken - 1]

    def close(self) -> None:
        self.closed = True


def _wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(0.05)


def test_the_watch_samples_from_its_first_use_and_says_why_when_it_cannot():
    reader = Scripted([LagSample(10, 0, 500), LagSample(11, 480, 500), LagSample(12, 300, 520)])
    watch = LagWatch(reader, span_s=10, interval_s=0.01)
    try:
        assert reader.taken == 0  # nothing asked of Kafka before the first window
        assert watch.lag_events(0, 10) == 500  # the first window: one sample, taken then
        _wait_until(lambda: reader.asked > 3, 60, "the watch's samples and a failure after them")
        assert watch.lag_events(10, 12) == 20  # the floor, not the last sample (220)
        with pytest.raises(LagUnknown, match="broker down"):
            watch.lag_events(13, 20)  # no sample covers the window: the reason is the last failure
    finally:
        watch.close()


def test_a_group_that_cannot_be_read_is_lag_unknown_at_the_first_window():
    watch = LagWatch(Scripted([]), span_s=10)
    with pytest.raises(LagUnknown, match="lag not readable"):
        watch.lag_events(0, 10)
    watch.close()


@pytest.mark.slow
def test_group_lag_is_end_offsets_minus_committed_over_every_partition(testbed):
    topic, group = f"lag-{secrets.token_hex(4)}", f"indexer-{secrets.token_hex(4)}"
    admin = AdminClient({"bootstrap.servers": testbed.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": testbed.bootstrap})
    for i in range(30):
        producer.produce(topic, b"x", partition=i % 2)  # 15 in each partition
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": testbed.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        # The group committed 10 of partition 0 and nothing of partition 1 (which counts from its start).
        consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        lag = GroupLag(testbed.bootstrap, group)
        first = lag.sample()
        assert (first.end, first.committed, first.lag_events) == (30, 10, 20)
        consumer.commit(offsets=[TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 12)], asynchronous=False)
        assert lag.sample().lag_events == 3
        with pytest.raises(LagUnknown, match="'nobody' has committed no offsets"):
            GroupLag(testbed.bootstrap, "nobody").sample()
    finally:
        consumer.close()
        admin.delete_topics([topic])


@pytest.mark.slow
def test_an_unreachable_group_is_lag_unknown_naming_the_group():
    lag = GroupLag("127.0.0.1:9", "shop-indexer", timeout_s=2)
    with pytest.raises(LagUnknown, match="consumer group 'shop-indexer'"):
        lag.sample()


def test_the_watch_stops_sampling_and_lets_go_of_kafka_when_closed():
    reader = Scripted([LagSample(t, 0, 1) for t in range(1000)])
    watch = LagWatch(reader, span_s=10, interval_s=0.01)
    watch.lag_events(0, 1)
    watch.close()
    assert not watch._thread.is_alive() and reader.closed


def test_every_watch_still_open_is_closed_at_once_before_its_brokers_go_away():
    readers = [Scripted([LagSample(t, 0, 1) for t in range(1000)]) for _ in range(2)]
    watches = [LagWatch(reader, span_s=10, interval_s=0.01) for reader in readers]
    watches[0].lag_events(0, 1)  # one sampling, one never used
    close_open_watches()
    assert all(reader.closed for reader in readers) and not watches[0]._thread.is_alive()


def test_a_watch_left_open_finishes_its_sample_before_the_interpreter_exits(tmp_path):
    # librdkafka torn down in the middle of a call segfaults: a watch nobody closed is closed at exit
    log = tmp_path / "samples.log"
    script = textwrap.dedent(f"""
        import time
        from controller.kafka_lag import LagSample, LagWatch

        class Slow:
            def sample(self):
                with open({str(log)!r}, "a") as f:
                    f.write("start\\n")
                time.sleep(0.3)
                with open({str(log)!r}, "a") as f:
                    f.write("done\\n")
                return LagSample(time.time(), 0, 1)

            def close(self):
                pass

        watch = LagWatch(Slow(), span_s=10, interval_s=0.01)
        watch.lag_events(0, 1)
        time.sleep(0.1)  # the thread is inside its next sample when the script ends
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    lines = log.read_text().split()
    assert lines[-1] == "done" and lines.count("start") == lines.count("done")
