"""Filebeat semantics, one at a time: harvester backoff, scan/close_inactive, multiline, queue flush, output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.models.twin.helpers import QUIET, config, poisson, run
from models.twin import Twin
from models.twin.core import Env
from models.twin.filebeat import MemQueue

FAST_READ = {"filebeat__backoff": 0.001, "filebeat__max_backoff": 0.001}


@pytest.mark.parametrize("timeout_s", [1.0, 2.5])
def test_an_isolated_event_waits_flush_timeout_when_min_events_is_not_reached(timeout_s: float) -> None:
    twin = run(config(filebeat__queue__mem__flush__timeout=timeout_s, **FAST_READ), [0.5], 10.0)
    waited = twin.stamps.sent[0] - twin.stamps.read[0]
    assert waited == pytest.approx(timeout_s, abs=0.002)


def test_min_events_flushes_without_waiting_for_the_timeout() -> None:
    arrivals = np.linspace(0.1, 0.2, 100)
    twin = run(config(filebeat__queue__mem__flush__min_events=100, filebeat__queue__mem__flush__timeout=30.0,
                      **FAST_READ), arrivals, 40.0)
    assert np.all(twin.stamps.sent - twin.stamps.read < 1.0)


def test_bulk_max_size_caps_every_batch() -> None:
    twin = run(config("zero-wait", filebeat__output__bulk_max_size=64, filebeat__output__pipelining=2),
               np.linspace(0.0, 0.05, 1000), 30.0)
    _, sizes = np.unique(twin.stamps.sent, return_counts=True)
    assert sizes.max() == 64 and sizes.sum() == 1000


def test_backoff_doubles_on_a_quiet_file_and_resets_on_data() -> None:
    cfg = config(filebeat__backoff=1.0, filebeat__max_backoff=10.0, filebeat__backoff_factor=2)
    first = run(cfg, [0.0, 16.0], 60.0).stamps.read
    # after the first line: empty polls wait 1, 2, 4, 8, then 10 (capped) seconds
    assert first[1] - first[0] == pytest.approx(1 + 2 + 4 + 8 + 10, abs=0.01)
    again = run(cfg, [0.0, 16.0, first[1] + 0.5], 60.0).stamps.read
    assert again[2] - again[1] == pytest.approx(1.0, abs=0.01)  # reset to `backoff` after data


def test_a_continuously_written_file_is_read_every_backoff_whatever_scan_frequency() -> None:
    arrivals = poisson(300, 30)
    for scan_s in (10.0, 0.01):
        twin = run(config(filebeat__scan_frequency=scan_s), arrivals, 40.0)
        delay = twin.stamps.read - twin.stamps.write
        assert delay.max() < 1.1 and delay.mean() == pytest.approx(0.5, abs=0.1)


def test_a_file_closed_by_close_inactive_is_picked_up_by_the_next_scan() -> None:
    base = {"filebeat__close_inactive": 2.0, "filebeat__max_backoff": 10.0}
    fast = run(config(filebeat__scan_frequency=0.5, **base), [0.0, 30.0], 60.0).stamps
    slow = run(config(filebeat__scan_frequency=20.0, **base), [0.0, 30.0], 80.0).stamps
    assert fast.read[1] - 30.0 <= 0.5 + 1e-3
    assert slow.read[1] - 30.0 > 0.5


def test_a_rotated_file_waits_for_the_next_scan() -> None:
    arrivals = np.linspace(0.0, 40.0, 4000)
    delays = {}
    for scan_s in (0.01, 10.0):
        stamps = run(config(filebeat__scan_frequency=scan_s), arrivals, 60.0, rotations_s=[20.0]).stamps
        after = (stamps.write >= 20.0) & (stamps.write < 21.0)
        delays[scan_s] = (stamps.read - stamps.write)[after].mean()
    assert delays[10.0] > delays[0.01] + 0.5


def _filebeat_cpu_s(twin: Twin, until_s: float) -> float:
    return twin.observe(0.0, until_s).cpu_cores["filebeat"] * until_s


def test_each_idle_file_the_globs_match_adds_its_cost_to_every_scan() -> None:
    per_file_s, scan_s, until_s = 2e-6, 0.1, 30.0
    arrivals = np.linspace(0.0, until_s, 600)
    cfg = config(filebeat__scan_frequency=scan_s)
    cal = QUIET.scaled(node__cpu_per_scanned_file_s=per_file_s)
    cpu = {idle: _filebeat_cpu_s(run(cfg, arrivals, until_s, cal=cal.scaled(node__idle_files=idle)), until_s)
           for idle in (0, 1000)}
    # charged at each poll: the scans up to the last poll, at most `backoff` (1 s) before the end
    assert cpu[1000] - cpu[0] == pytest.approx(until_s / scan_s * 1000 * per_file_s, rel=0.05)


def test_a_rotated_files_harvester_polls_its_eof_until_close_inactive() -> None:
    poll_s = 1e-3
    arrivals = np.linspace(0.0, 100.0, 2000)  # the live file never goes quiet: its harvester stays open
    cal = QUIET.scaled(filebeat__cpu_per_poll_s=poll_s)
    cpu = {close_s: _filebeat_cpu_s(run(config(filebeat__close_inactive=close_s, filebeat__backoff=1.0,
                                               filebeat__max_backoff=10.0, filebeat__backoff_factor=2),
                                        arrivals, 100.0, cal=cal, rotations_s=[10.0]), 100.0)
           for close_s in (5.0, 80.0)}
    # after its last line L: empty reads at L+1, L+3, L+7 (closes: >= 5 s), or on to L+15, L+25, ..., L+85
    assert cpu[80.0] - cpu[5.0] == pytest.approx(8 * poll_s, rel=1e-6)


def test_multiline_holds_the_last_event_until_multiline_timeout() -> None:
    cfg = config(filebeat__multiline__timeout=3.0, **FAST_READ)
    single = run(cfg, [1.0], 20.0, multiline=False).stamps
    multi = run(cfg, [1.0, 1.2], 20.0, multiline=True).stamps
    assert single.read[0] - 1.0 < 0.01
    assert multi.read[0] - 1.2 < 0.01  # complete once the next event's first line is read
    assert multi.read[1] - 1.2 == pytest.approx(3.0, abs=0.01)  # the last one waits for the timeout


def test_pipelining_bounds_the_batches_in_flight() -> None:
    for pipelining, slots in ((0, 1), (3, 3)):
        twin = Twin(config("zero-wait", filebeat__output__pipelining=pipelining), poisson(800, 5), QUIET, seed=0)
        seen: list[int] = []
        receive = twin.downstream.receive

        def spy(*args: object, _receive=receive, _seen=seen, _twin=twin) -> None:
            _seen.append(_twin.output.in_flight)
            _receive(*args)

        twin.downstream.receive = spy  # type: ignore[method-assign]
        twin.run_until(10.0)
        assert max(seen) == slots


def test_a_full_queue_pushes_back_on_the_harvester_instead_of_dropping() -> None:
    capacity = 512
    twin = run(config("micro-batching", filebeat__queue__mem__events=capacity), poisson(900, 20), 20.0)
    obs = twin.observe(0.0, 20.0)
    assert obs.lost_events == 0
    assert twin.queue.inserted - twin.queue.acked <= capacity
    assert obs.backlog_events["nginx->filebeat"] > 5 * capacity  # the backlog waits in the file


class _RecordingOutput:
    """A stub consumer: once events are visible it takes them all and records (time, lo, hi)."""

    def __init__(self, env: Env, queue: MemQueue) -> None:
        self.env, self.queue = env, queue
        self.batches: list[tuple[float, int, int]] = []

    def kick(self) -> None:
        visible_s = self.queue.next_available()
        if visible_s < math.inf:
            self.env.clock.at(visible_s, self._take)

    def _take(self, _: object) -> None:
        lo, hi = self.queue.take(1000, self.env.clock.now)
        if hi > lo:
            self.batches.append((self.env.clock.now, lo, hi))


class _CountingReader:
    def __init__(self) -> None:
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1


def test_the_memory_queue_alone_flushes_on_min_events_or_timeout_and_wakes_its_reader_on_acks() -> None:
    env = Env.create(QUIET, np.arange(6) * 0.1, np.random.default_rng(0))
    queue = MemQueue(env, config(filebeat__queue__mem__flush__min_events=4, filebeat__queue__mem__flush__timeout=1.0))
    reader, output = _CountingReader(), _RecordingOutput(env, queue)
    queue.connect(reader, output)
    queue.insert(0, 4, np.array([0.1, 0.2, 0.3, 0.4]))  # fills a buffer: visible at its 4th event
    queue.insert(4, 6, np.array([0.5, 0.6]))  # a partial buffer: visible flush.timeout after its first
    env.clock.run_until(5.0)
    assert output.batches == [(0.4, 0, 4), (1.5, 4, 6)]
    assert reader.wakes == 0
    queue.ack(0)
    assert reader.wakes == 1 and queue.space() == 4096 - 2
