"""The end of the pipeline: a Spark-like micro-batch sink, or a plain Kafka consumer.

- Spark Structured Streaming (`Trigger.ProcessingTime(interval)`): a micro-batch takes every record
  in Kafka at its start, and ends `batch_latency_s` (job scheduling, Hive insert and commit) plus its
  CPU later; the next starts at the next interval boundary, or at once if the batch overran it;
  interval 0 starts the next batch as soon as one ends, re-polling an idle source every poll_delay_s.
- Kafka consumer (fetch.min.bytes / fetch.max.wait.ms, Kafka consumer configs): the broker answers a
  fetch when it has fetch.min.bytes for it or fetch.max.wait.ms has passed; the consumer processes
  the records, then fetches again.
Records appended by concurrent producers need not be in index order, so both select by append time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from models.space import Config

if TYPE_CHECKING:
    from models.twin.twin import Twin

SINK = 4  # index in core.COMPONENTS


class _Sink:
    def __init__(self, twin: "Twin") -> None:
        self.tw = twin
        self.lo = 0  # every event before lo is delivered
        self.token = 0
        self.busy = False
        self.paused_until = 0.0

    def _window(self) -> tuple[np.ndarray, np.ndarray]:
        tw = self.tw
        return tw.stamps.kafka[self.lo:tw.appended_hi], tw.stamps.sink[self.lo:tw.appended_hi]

    def _deliver(self, upto_s: float, at_s: float) -> int:
        """Deliver every waiting record appended by `upto_s`, stamping `at_s`; return how many."""
        kafka, sink = self._window()
        chosen = (kafka <= upto_s) & np.isinf(sink)
        n = int(np.count_nonzero(chosen))
        if n:
            sink[chosen] = at_s
            waiting = np.isinf(sink)
            self.lo += int(np.argmax(waiting)) if waiting.any() else sink.size
        return n

    def _next_append(self, after_s: float) -> float:
        kafka, sink = self._window()
        later = kafka[np.isinf(sink) & (kafka > after_s)]
        return float(later.min()) if later.size else math.inf

    def _schedule(self, t_s: float) -> None:
        self.token += 1
        self.busy = True
        self.tw.clock.at(max(t_s, self.paused_until), self._run, self.token)

    def restart(self, t_s: float, pause_s: float) -> None:
        self.paused_until = t_s + pause_s
        self._schedule(self.paused_until)

    def _run(self, token: int) -> None:
        raise NotImplementedError


class SparkSink(_Sink):
    """Structured-Streaming-like micro-batches reading Kafka, writing to a warehouse."""

    def __init__(self, twin: "Twin", phase: float) -> None:
        super().__init__(twin)
        self.phase = phase  # where in each period the triggers fall, in [0, 1)
        self.configure(twin.config)

    def configure(self, config: Config) -> None:
        self.interval_s = float(config["spark.trigger.interval"])

    def _boundary(self, t_s: float) -> float:
        """The first trigger time at or after `t_s` (idle re-polls when the interval is 0)."""
        period = self.interval_s if self.interval_s > 0 else self.tw.cal.spark.poll_delay_s
        offset = self.phase * period
        return offset + max(0, math.ceil((t_s - offset) / period)) * period

    def notify(self, append_s: float) -> None:
        if not self.busy:
            self._schedule(self._boundary(append_s))

    def _run(self, token: int) -> None:
        if token != self.token:
            return
        tw = self.tw
        t = tw.clock.now
        kafka, sink = self._window()
        n = int(np.count_nonzero((kafka <= t) & np.isinf(sink)))
        if n == 0:
            self.busy = False
            nxt = self._next_append(t)
            if nxt < math.inf:
                self._schedule(self._boundary(nxt))
            return
        cal = tw.cal.spark
        cpu = (cal.cpu_per_batch_s + cal.cpu_per_record_s * n) * tw.cpu.slowdown(t) * tw.jitter()
        tw.cpu.charge(SINK, t, cpu)
        end = t + cal.batch_latency_s + cpu
        self._deliver(t, end)
        self._schedule(max(end, self._boundary(t + 1e-9)) if self.interval_s > 0 else end)


class ConsumerSink(_Sink):
    """A Kafka consumer loop: fetch, wait for fetch.min.bytes or fetch.max.wait.ms, process, repeat."""

    def __init__(self, twin: "Twin") -> None:
        super().__init__(twin)
        self.fetch_at = 0.0
        self.configure(twin.config)

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
        kafka, sink = self._window()
        waiting = kafka[np.isinf(sink) & np.isfinite(kafka)]
        need = max(1, math.ceil(self.min_bytes / self.tw.cal.event_bytes))
        # the need-th earliest append; a partition, not a sort: this runs after every append
        enough = float(np.partition(waiting, need - 1)[need - 1]) if waiting.size >= need else math.inf
        self._schedule(min(max(enough, self.fetch_at), self.fetch_at + self.max_wait_s))

    def _run(self, token: int) -> None:
        if token != self.token:
            return
        tw = self.tw
        t = tw.clock.now
        self.busy = False
        half_rtt = tw.cal.network.rtt_s / 2
        kafka, sink = self._window()
        n = int(np.count_nonzero((kafka <= t) & np.isinf(sink)))
        cal = tw.cal.consumer
        cpu = (cal.cpu_per_fetch_s + cal.cpu_per_record_s * n) * tw.cpu.slowdown(t) * tw.jitter()
        tw.cpu.charge(SINK, t, cpu)
        tw.cpu.send(t, 2)
        done = t + half_rtt + cpu
        self._deliver(t, done)
        self.fetch_at = done + half_rtt
        self._answer_at()
