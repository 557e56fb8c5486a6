"""The open-loop scheduler: every event goes out at its scheduled time, whatever the sink does.

An event's send lag is how late it went out (actual − scheduled); a slow sink shows up as lag, never
as a stretched schedule, so there is no coordinated omission. While waiting for the next due time
the scheduler renders upcoming events, so the write path only stamps `ts_nginx`. To reach high
rates the schedule can be dealt round-robin to several processes, which start together on a shared
wall-clock instant.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from replay.arrivals import Phase, Schedule
from replay.events import RequestSource, TraceRequests
from replay.shop import ShopUsers
from replay.sinks import SinkSpec, SinkStats
from replay.trace import TraceRecord

_MAX_BATCH = 1000  # events written in one call, bounding how long one write holds the loop
_LOOKAHEAD = 2000  # events rendered ahead of their due time
_RENDER_CHUNK = 64
_START_DELAY_S = 0.5  # lets every process finish starting before the first event is due
_PROGRESS_EVERY_S = 0.2


@dataclass(frozen=True)
class Workload:
    """What to send: the requests' source (shop users, or a trace's records) and the log format."""

    fmt: str = "json"
    trace_records: tuple[TraceRecord, ...] = ()
    concurrent_sessions: int = 200

    def source(self, seed: int) -> RequestSource:
        if self.trace_records:
            return TraceRequests(list(self.trace_records))
        return ShopUsers(seed, self.concurrent_sessions)


@dataclass
class PhaseResult:
    """A phase's target rate next to the rate the run achieved in it."""

    start_s: float
    end_s: float
    target_eps: float
    achieved_eps: float


@dataclass
class ReplayResult:
    """Everything a run measured: per-event send times and lags, and what the sinks reported."""

    run_id: str
    schedule: Schedule
    started_at: float  # epoch seconds of t = 0
    sent_at_s: np.ndarray  # seconds from start, per sent event (any order)
    send_lag_s: np.ndarray
    sink: SinkStats
    processes: int = 1
    phases: list[PhaseResult] = field(default_factory=list)

    @property
    def events(self) -> int:
        return int(self.sent_at_s.size)

    @property
    def duration_s(self) -> float:
        return float(max(self.schedule.duration_s, self.sent_at_s.max(initial=0.0)))

    @property
    def achieved_eps(self) -> float:
        return self.events / self.duration_s if self.duration_s > 0 else 0.0

    def lag_ms(self, q: float) -> float:
        return float(np.percentile(self.send_lag_s, q) * 1000) if self.send_lag_s.size else 0.0

    def summary(self) -> dict:
        """The machine-readable summary of `pipetune replay --json` (with the Kafka sink, acknowledgement latency)."""
        acks = {}
        if self.sink.ack_latency_s:
            quantiles = np.percentile(self.sink.ack_latency_s, [50, 95, 99, 99.9]) * 1000
            acks = {f"ack_latency_{name}_ms": round(float(q), 3) for name, q in zip(("p50", "p95", "p99", "p999"),
                                                                                      quantiles)}
        return {
            "run_id": self.run_id,
            "events": self.events,
            "duration_s": round(self.duration_s, 3),
            "achieved_eps": round(self.achieved_eps, 2),
            "send_lag_p50_ms": round(self.lag_ms(50), 3),
            "send_lag_p99_ms": round(self.lag_ms(99), 3),
            "delivered": self.sink.delivered,
            "failed": len(self.sink.failed_request_ids),
            "sink": self.sink.detail,
            **acks,
            "phases": [vars(p) | {"achieved_eps": round(p.achieved_eps, 2)} for p in self.phases],
        }


ProgressFn = Callable[[int, float, float], None]  # (events sent, seconds since start, recent lag in s)


@dataclass
class _Shard:
    times_s: np.ndarray
    seqs: np.ndarray


def _drive(shard: _Shard, start_wall: float, run_id: str, workload: Workload, seed: int,
           sink_spec: SinkSpec, index: int, processes: int, progress: Callable[[int, float], None] | None):
    """Send one shard of the schedule; returns (sent_at_s, send_lag_s, sink stats)."""
    sink = sink_spec.open(index, processes)
    source = workload.source(seed + index)
    times, n = shard.times_s, shard.times_s.size
    times_list, seqs = shard.times_s.tolist(), shard.seqs.tolist()  # plain floats: cheaper per event
    sent_at = np.empty(n)
    ready: deque = deque()
    rendered = done = 0

    def render_until(limit: int) -> None:
        nonlocal rendered
        prepare, next_request, fmt, append = sink.prepare, source.next_request, workload.fmt, ready.append
        for k in range(rendered, limit):
            append(prepare(seqs[k], run_id, start_wall + times_list[k], next_request(), fmt))
        rendered = max(rendered, limit)

    # Map the monotonic clock onto the shared wall-clock start once, so stamps never jump.
    mono0 = time.perf_counter() + (start_wall - time.time())
    next_progress = 0.0
    try:
        while done < n:
            now = time.perf_counter() - mono0
            due = int(np.searchsorted(times, now, side="right"))
            if due > done:
                end = min(due, done + _MAX_BATCH)
                render_until(end)  # behind the schedule: render what is due right now
                batch = [ready.popleft() for _ in range(end - done)]
                write_s = time.perf_counter() - mono0
                sink.send(batch, start_wall + write_s)
                sent_at[done:end] = write_s
                done = end
            elif rendered < min(n, done + _LOOKAHEAD) and times_list[done] - now > 0.0005:
                render_until(min(n, rendered + _RENDER_CHUNK))
            else:
                sink.wait(max(0.0, times_list[done] - now))
            if progress is not None and now >= next_progress:
                progress(done, float(sent_at[done - 1] - times[done - 1]) if done else 0.0)
                next_progress = now + _PROGRESS_EVERY_S
    finally:
        stats = sink.close()
    if progress is not None:
        progress(done, float(sent_at[-1] - times[-1]) if n else 0.0)
    return sent_at, sent_at - times, stats


def _worker(args, counters, lags, index, results) -> None:
    def report(done: int, lag_s: float) -> None:
        counters[index] = done
        lags[index] = lag_s

    results.put((index, _drive(*args, index, len(counters), report)))


def phase_results(phases: list[Phase], sent_at_s: np.ndarray) -> list[PhaseResult]:
    """Each phase's target beside the rate of the given send times within it."""
    results = []
    for p in phases:
        count = int(np.count_nonzero((sent_at_s >= p.start_s) & (sent_at_s < p.end_s)))
        results.append(PhaseResult(p.start_s, p.end_s, p.target_eps, count / (p.end_s - p.start_s)))
    return results


def run(schedule: Schedule, sink_spec: SinkSpec, workload: Workload = Workload(), *, run_id: str,
        processes: int = 1, progress: ProgressFn | None = None) -> ReplayResult:
    """Send `schedule` to the sink (dealt to `processes` processes) and measure every send."""
    seqs = np.arange(schedule.events)
    shards = [_Shard(schedule.times_s[k::processes], seqs[k::processes]) for k in range(processes)]
    start_wall = time.time() + (_START_DELAY_S if processes > 1 else 0.01)
    if processes == 1:
        report = (lambda done, lag: progress(done, time.time() - start_wall, lag)) if progress else None
        sent_at, lag, stats = _drive(shards[0], start_wall, run_id, workload, schedule.seed, sink_spec, 0, 1, report)
        parts, all_stats = [(sent_at, lag)], [stats]
    else:
        parts, all_stats = _run_processes(shards, start_wall, run_id, workload, schedule.seed, sink_spec, progress)
    sent_at = np.concatenate([p[0] for p in parts])
    lag = np.concatenate([p[1] for p in parts])
    merged = SinkStats(
        delivered=sum(s.delivered for s in all_stats),
        failed_request_ids=[r for s in all_stats for r in s.failed_request_ids],
        detail={k: sum(s.detail.get(k, 0) for s in all_stats) for s in all_stats for k in s.detail},
        ack_latency_s=[x for s in all_stats for x in s.ack_latency_s],
    )
    return ReplayResult(run_id, schedule, start_wall, sent_at, lag, merged, processes,
                        phase_results(schedule.phases, sent_at))


def _run_processes(shards, start_wall, run_id, workload, seed, sink_spec, progress):
    ctx = mp.get_context("spawn")
    counters = ctx.Array("q", len(shards), lock=False)
    lags = ctx.Array("d", len(shards), lock=False)
    results = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=((shard, start_wall, run_id, workload, seed, sink_spec), counters,
                                                 lags, k, results), daemon=True)
               for k, shard in enumerate(shards)]
    for w in workers:
        w.start()
    collected: dict[int, tuple] = {}
    while len(collected) < len(workers):
        if progress:
            progress(int(sum(counters)), time.time() - start_wall, max(lags))
        try:
            index, outcome = results.get(timeout=_PROGRESS_EVERY_S)
            collected[index] = outcome
        except queue.Empty:
            dead = [w for i, w in enumerate(workers) if not w.is_alive() and i not in collected]
            if dead and results.empty():
                raise RuntimeError(f"replay process exited with code {dead[0].exitcode}")
    for w in workers:
        w.join()
    ordered = [collected[k] for k in range(len(workers))]
    return [(r[0], r[1]) for r in ordered], [r[2] for r in ordered]
