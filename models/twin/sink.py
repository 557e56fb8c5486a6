"""The end of the pipeline: a Spark-like micro-batch sink, or a plain Kafka consumer.

- Spark Structured Streaming (`Trigger.ProcessingTime(interval)`): a micro-batch takes every record
  in Kafka at its start, up to `maxOffsetsPerTrigger` of them, and ends `batch_latency_s` (job scheduling,
  Hive insert and commit) plus its CPU later; the next starts at the next interval boundary, or at once if
  the batch overran it; interval 0 starts the next batch as soon as one ends, re-polling an idle source
  every poll_delay_s. Records a limit left behind wait for the next batch, as in Spark.
- Kafka consumer (fetch.min.bytes / fetch.max.wait.ms, Kafka consumer configs): the broker answers a
  fetch when it has fetch.min.bytes for it or fetch.max.wait.ms has passed; the consumer processes
  the records, then fetches again.
Records appended by concurrent producers need not be in index order, so both select by append time.
"""

from __future__ import annotations

import bisect
import math

from models.space import Config
from models.twin.core import Env
from models.twin.ports import Segment


class _Sink:
    def __init__(self, env: Env) -> None:
        self.env = env
        # appended, undelivered records as (append time, lo, hi), sorted by append time: a plain list,
        # because every append and fetch touches only its ends and numpy calls per fetch cost more
        self.waiting: list[Segment] = []
        self.waiting_records = 0
        self.token = 0
        self.busy = False
        self.paused_until = 0.0

    def add(self, segments: list[Segment]) -> None:
        """Records [lo, hi) of each segment are appended at its time (which may lie in the future)."""
        for segment in segments:
            self.waiting_records += segment[2] - segment[1]
            if not self.waiting or segment >= self.waiting[-1]:
                self.waiting.append(segment)
            else:
                bisect.insort(self.waiting, segment)
        self.notify(min((segment[0] for segment in segments), default=math.inf))

    def _ready(self, upto_s: float, limit: float = math.inf) -> tuple[int, int]:
        """How many waiting segments, and records, were appended by `upto_s`, at most `limit` records: the
        segment the limit falls in is split, its records beyond the limit left waiting."""
        k = n = 0
        for append_s, lo, hi in self.waiting:
            if append_s > upto_s:
                break
            if n + hi - lo > limit:  # the limit falls inside this segment
                cut = lo + int(limit - n)
                if cut > lo:
                    self.waiting[k:k + 1] = [(append_s, lo, cut), (append_s, cut, hi)]
                    k, n = k + 1, n + cut - lo
                break
            k += 1
            n += hi - lo
        return k, n

    def _deliver(self, segments: int, at_s: float) -> None:
        """Deliver the first `segments` waiting segments, stamping `at_s`."""
        sink = self.env.stamps.sink
        for _, lo, hi in self.waiting[:segments]:
            sink[lo:hi] = at_s
            self.waiting_records -= hi - lo
        del self.waiting[:segments]

    def _schedule(self, t_s: float) -> None:
        self.token += 1
        self.busy = True
        self.env.clock.at(max(t_s, self.paused_until), self._run, self.token)

    def restart(self, t_s: float, pause_s: float) -> None:
        self.paused_until = t_s + pause_s
        self._schedule(self.paused_until)

    def notify(self, append_s: float) -> None:
        raise NotImplementedError

    def _run(self, token: int) -> None:
        raise NotImplementedError


class SparkSink(_Sink):
    """Structured-Streaming-like micro-batches reading Kafka, writing to a warehouse."""

    def __init__(self, env: Env, config: Config, phase: float) -> None:
        super().__init__(env)
        self.phase = phase  # where in each period the triggers fall, in [0, 1)
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.interval_s = float(config["spark.trigger.interval"])
        self.max_records = int(config["spark.maxOffsetsPerTrigger"])

    def _boundary(self, t_s: float) -> float:
        """The first trigger time at or after `t_s` (idle re-polls when the interval is 0)."""
        period = self.interval_s if self.interval_s > 0 else self.env.calibration.spark.poll_delay_s
        offset = self.phase * period
        return offset + max(0, math.ceil((t_s - offset) / period)) * period

    def notify(self, append_s: float) -> None:
        if not self.busy:
            self._schedule(self._boundary(append_s))

    def _run(self, token: int) -> None:
        if token != self.token:
            return
        env = self.env
        t = env.clock.now
        segments, n = self._ready(t, self.max_records)
        if n == 0:
            self.busy = False
            if self.waiting:  # every waiting record is appended after t: start at the first's boundary
                self._schedule(self._boundary(self.waiting[0][0]))
            return
        cal = env.calibration.spark
        cpu = (cal.cpu_per_batch_s + cal.cpu_per_record_s * n) * env.cpu.slowdown(t) * env.jitter()
        env.cpu.charge("sink", t, cpu)
        end = t + cal.batch_latency_s + cpu
        self._deliver(segments, end)
        self._schedule(max(end, self._boundary(t + 1e-9)) if self.interval_s > 0 else end)


class ConsumerSink(_Sink):
    """A Kafka consumer loop: fetch, wait for fetch.min.bytes or fetch.max.wait.ms, process, repeat."""

    def __init__(self, env: Env, config: Config) -> None:
        super().__init__(env)
        self.fetch_at = 0.0
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.min_bytes = int(config["kafka.consumer.fetch.min.bytes"])
        self.max_wait_s = float(config["kafka.consumer.fetch.max.wait.ms"]) / 1000.0

    def start(self, t_s: float) -> None:
        self.fetch_at = t_s
        self._answer_at()

    def notify(self, append_s: float) -> None:
        if self.busy:
            self._answer_at()

    def _answer_at(self) -> None:
        """When the broker answers the outstanding fetch, given the appends known so far."""
        need = max(1, math.ceil(self.min_bytes / self.env.calibration.event_bytes))
        enough = math.inf  # the need-th earliest append
        for append_s, lo, hi in self.waiting if self.waiting_records >= need else ():
            need -= hi - lo
            if need <= 0:
                enough = append_s
                break
        self._schedule(min(max(enough, self.fetch_at), self.fetch_at + self.max_wait_s))

    def _run(self, token: int) -> None:
        if token != self.token:
            return
        env = self.env
        t = env.clock.now
        self.busy = False
        half_rtt = env.calibration.network.rtt_s / 2
        segments, n = self._ready(t)
        cal = env.calibration.consumer
        cpu = (cal.cpu_per_fetch_s + cal.cpu_per_record_s * n) * env.cpu.slowdown(t) * env.jitter()
        env.cpu.charge("sink", t, cpu)
        env.cpu.send(t, 2)
        done = t + half_rtt + cpu
        self._deliver(segments, done)
        self.fetch_at = done + half_rtt
        self._answer_at()
