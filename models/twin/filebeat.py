"""Filebeat 7.17: `log` input harvester, memory queue, and the Logstash (lumberjack) output.

Semantics, each from the component's own source (libbeat / filebeat 7.17):
- Harvester (filebeat/input/log/log.go `Log.Read`/`wait`): reads until EOF, then sleeps `backoff`;
  each further empty read multiplies the sleep by `backoff_factor` up to `max_backoff`; any data read
  resets it to `backoff`. So a continuously written file is read every `backoff` (1 s by default),
  whatever `scan_frequency` is, and a quiet file is re-checked ever more rarely.
- `close_inactive` (log.go `errorChecks`): at EOF, a harvester whose last line is older than it
  closes; the file is then only picked up again by the prospector's next scan, every `scan_frequency`.
  At rotation the new file is likewise found by the next scan. (Approximation: events are read in
  write order, so a new file's lines are not read before the rotated file's tail.)
- What scans and polls cost (input/log/input.go `scan`, `getFiles`): every `scan_frequency` the prospector
  globs the input's paths and stats each file they match, so a scan costs `cpu_per_scan_s` (the live log
  alone) plus the node's `cpu_per_scanned_file_s` for each of its `idle_files`, rotated files that no longer
  grow; their count stays as it is (logrotate removes the oldest as it adds one). An idle file costs no
  harvester: Filebeat read it once when it appeared, and its harvester closed `close_inactive` (5 min by
  default) after that, so the registry holds it as read to the end and only the scan pays for it. Each
  EOF poll of an open harvester costs `cpu_per_poll_s`: the live log's, and the harvester of a file
  rotated away, which backs off at its EOF until `close_inactive` after its last line (charged when the
  rotation is seen, with the backoff then in force).
- Multiline (`multiline.pattern` + negate/match after): an event is complete when the first line of
  the next one is read, or `multiline.timeout` after its last line if none comes.
- Memory queue (libbeat/publisher/queue/memqueue `bufferingEventLoop`): with flush.min_events > 1
  and flush.timeout > 0, events gather in a buffer that is handed to the output when it holds
  min_events or `flush.timeout` after its first event. A buffer flushed by the timer stays open and
  later events in it are visible at once, until the output empties it (`advanceFlushList`) or it
  reaches min_events. Otherwise (min_events <= 1 or timeout 0) events are visible at once.
  `queue.mem.events` counts events until the output ACKs them; a full queue blocks the harvester.
- Output (`output.logstash`): batches of at most `bulk_max_size`; each of `worker` connections keeps
  `pipelining` batches in flight (0: synchronous, one); a slot frees when Logstash ACKs the batch.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import numpy as np

from models.space import Config
from models.twin.core import Env, packets_for
from models.twin.ports import Consumer, EventQueue, Reader, Receiver, Source


class Harvester:
    """One `log` input following the current log file (and its rotations)."""

    def __init__(self, env: Env, config: Config, queue: EventQueue, rotations_s: np.ndarray, multiline: bool,
                 scan_phase: float) -> None:
        self.env = env
        self.queue = queue
        self.write_s = env.stamps.write
        self.n = self.write_s.size
        self.ptr = 0  # next event (line) to read
        self.multiline = multiline
        self.pending = -1  # multiline: the event whose end is not yet seen
        self.pending_deadline = math.inf
        self.rotation_idx = np.searchsorted(self.write_s, rotations_s).tolist() + [self.n]
        self.file = 0
        self.scan_phase = scan_phase
        self.last_read = 0.0
        self.busy_until = 0.0
        self.blocked = False
        self.paused_until = 0.0
        self.scan_charged_to = 0.0
        self.token = 0
        self.configure(config)
        self.next_wait = self.backoff

    def configure(self, config: Config) -> None:
        self.backoff = float(config["filebeat.backoff"])
        self.max_backoff = max(float(config["filebeat.max_backoff"]), self.backoff)
        self.factor = int(config["filebeat.backoff_factor"])
        self.scan_s = float(config["filebeat.scan_frequency"])
        self.close_inactive = float(config["filebeat.close_inactive"])
        self.ml_timeout = float(config["filebeat.multiline.timeout"])

    def start(self, t_s: float) -> None:
        self._schedule(t_s)

    def _schedule(self, t_s: float) -> None:
        self.token += 1
        self.env.clock.at(max(t_s, self.paused_until), self.poll, self.token)

    def next_scan(self, t_s: float) -> float:
        k = math.ceil((t_s - self.scan_phase) / self.scan_s)
        return self.scan_phase + max(k, 0) * self.scan_s

    def restart(self, t_s: float, pause_s: float, rewind_to: int) -> None:
        """Filebeat restarts: reading resumes after `pause_s` from the last event handed to the output."""
        self.ptr = min(self.ptr, rewind_to)
        self.pending = -1
        self.blocked = False
        self.paused_until = t_s + pause_s
        while self.file > 0 and self.rotation_idx[self.file - 1] > self.ptr:
            self.file -= 1
        self.next_wait = self.backoff
        self._schedule(self.paused_until)

    def wake(self) -> None:
        """The queue has room again: a blocked harvester carries on reading without an EOF wait."""
        if self.blocked:
            self.blocked = False
            self._schedule(max(self.env.clock.now, self.busy_until))

    def poll(self, token: int) -> None:
        if token != self.token:
            return
        env = self.env
        t = env.clock.now
        self._charge_scans(t)
        file_end = self.rotation_idx[self.file]
        if self.ptr >= file_end and file_end < self.n:
            # the writer moved to a new file: a harvester for it starts at the prospector's next scan, while the
            # rotated file's harvester polls its EOF until it closes
            env.cpu.charge_many("filebeat", self._rotated_polls(t), env.calibration.filebeat.cpu_per_poll_s)
            self.file += 1
            self.next_wait = self.backoff
            self._schedule(self.next_scan(max(t, float(self.write_s[file_end]))))
            return
        hi = min(int(np.searchsorted(self.write_s, t, "right")), file_end)
        if hi <= self.ptr:
            self._at_eof(t)
            return
        m = min(hi - self.ptr, self.queue.space())
        if m <= 0:
            self.blocked = True
            return
        cost = env.calibration.filebeat.cpu_per_event_s * env.cpu.slowdown(t) * env.jitter()
        times = t + cost * np.arange(1, m + 1)
        env.cpu.charge("filebeat", t, cost * m)
        lo = self.ptr
        self.ptr += m
        self.last_read = self.busy_until = float(times[-1])
        self._emit(lo, self.ptr, times)
        self.next_wait = min(self.backoff * self.factor, self.max_backoff)
        if self.ptr < hi:
            self.blocked = True  # the queue is full: wait for ACKs
        elif self.ptr < file_end and self.write_s[self.ptr] <= self.busy_until:
            self._schedule(self.busy_until)  # lines arrived while reading: no EOF, no wait
        else:
            self._schedule(self.busy_until + self.backoff)

    def _at_eof(self, t: float) -> None:
        self.env.cpu.charge("filebeat", t, self.env.calibration.filebeat.cpu_per_poll_s)
        if t - self.last_read >= self.close_inactive:
            self.next_wait = self.backoff
            if self.ptr < self.n:
                self._schedule(self.next_scan(float(self.write_s[self.ptr])))
            return
        self._schedule(t + self.next_wait)
        self.next_wait = min(self.next_wait * self.factor, self.max_backoff)

    def _rotated_polls(self, t: float) -> np.ndarray:
        """When the harvester of the file just rotated away polls it: at `t` (an empty read), then after
        `next_wait`, each wait `backoff_factor` times the last up to `max_backoff`, closing at the first poll
        `close_inactive` after its last read."""
        close_at = self.last_read + self.close_inactive
        polls, wait = [t], self.next_wait
        while t < close_at and wait < self.max_backoff and self.factor > 1:
            t += wait
            polls.append(t)
            wait = min(wait * self.factor, self.max_backoff)
        steady = t + wait * np.arange(1, max(math.ceil((close_at - t) / wait), 0) + 1)
        return np.concatenate((polls, steady))

    def _charge_scans(self, t: float) -> None:
        scans = (t - self.scan_charged_to) / self.scan_s
        cal = self.env.calibration
        per_scan = cal.filebeat.cpu_per_scan_s + cal.node.cpu_per_scanned_file_s * cal.node.idle_files
        self.env.cpu.charge("filebeat", t, scans * per_scan)
        self.scan_charged_to = t

    def _emit(self, lo: int, hi: int, times: np.ndarray) -> None:
        """Publish lines [lo, hi) read at `times` as events (multiline: each ends at the next one's start)."""
        read = self.env.stamps.read
        if not self.multiline:
            read[lo:hi] = times
            self.queue.insert(lo, hi, times)
            return
        first = lo
        if self.pending >= 0:
            if times[0] <= self.pending_deadline:
                first = self.pending
            else:  # its timeout fell while this read was under way
                read[self.pending] = self.pending_deadline
                self.queue.insert(self.pending, lo, np.array([self.pending_deadline]))
            self.pending = -1
        created = (times if first < lo else times[1:])[: hi - 1 - first]
        if hi - 1 > first:
            read[first:hi - 1] = created
            self.queue.insert(first, hi - 1, created)
        self.pending = hi - 1
        self.pending_deadline = float(times[-1]) + self.ml_timeout
        self.env.clock.at(self.pending_deadline, self._multiline_timeout, hi - 1)

    def _multiline_timeout(self, index: int) -> None:
        if self.pending != index:
            return
        self.pending = -1
        t = np.array([self.env.clock.now])
        self.env.stamps.read[index] = t[0]
        self.queue.insert(index, index + 1, t)


class MemQueue:
    """`queue.mem`: events [ack, taken) are in flight, [taken, inserted) wait for the output.

    Its reader (the harvester) and consumer (the output) are given by `connect`: each also holds the
    queue, so one of the pair must exist before the other."""

    reader: Reader
    consumer: Consumer

    def __init__(self, env: Env, config: Config) -> None:
        self.env = env
        self.inserted = self.taken = self.acked = 0
        self.available_at = np.full(env.stamps.write.size, math.inf)  # when each event became visible
        self.buf_lo = 0
        self.buf_flushed = False
        self.deadline = math.inf  # when the open buffer flushes on its timeout
        self.timer_token = 0
        self.in_flight: deque[list[int]] = deque()  # [lo, hi, acked]
        self.configure(config)

    def connect(self, reader: Reader, consumer: Consumer) -> None:
        """`reader` is woken when ACKs free room; `consumer` is kicked when events may be visible."""
        self.reader = reader
        self.consumer = consumer

    def configure(self, config: Config) -> None:
        self.capacity = int(config["filebeat.queue.mem.events"])
        self.min_events = min(int(config["filebeat.queue.mem.flush.min_events"]), self.capacity)
        self.timeout_s = float(config["filebeat.queue.mem.flush.timeout"])
        self.direct = self.min_events <= 1 or self.timeout_s <= 0

    def space(self) -> int:
        return self.capacity - (self.inserted - self.acked)

    def restart(self) -> int:
        """Drop what the output has not taken (it will be re-read); return the harvester's rewind point."""
        self.available_at[self.taken:self.inserted] = math.inf
        self.inserted = self.buf_lo = self.taken
        self.buf_flushed = False
        self.timer_token += 1
        return self.taken

    def insert(self, lo: int, hi: int, times: np.ndarray) -> None:
        assert lo == self.inserted, (lo, self.inserted)
        if self.direct:
            self.available_at[lo:hi] = times
        else:
            self._insert_buffered(lo, hi, times)
        self.inserted = hi
        self.consumer.kick()

    def _insert_buffered(self, lo: int, hi: int, times_array: np.ndarray) -> None:
        """Batch lines [lo, hi), read at `times_array`, into flush buffers: a buffer becomes visible when it
        holds min_events, or at its first event + flush.timeout, after which events pass until the next
        buffer starts. Plain Python over the batch: with small buffers, a numpy call per buffer cost more
        than the work; only the buffer still open at the end gets a timer."""
        times = times_array.tolist()
        available = [math.inf] * (hi - lo)
        buf_lo, flushed, deadline, token = self.buf_lo, self.buf_flushed, self.deadline, self.timer_token
        min_events, timeout_s, taken = self.min_events, self.timeout_s, self.taken
        timer_due = False

        def visible(a: int, b: int, t: float) -> None:
            if a < lo:  # a buffer begun in an earlier batch
                self.available_at[a:lo] = t
                a = lo
            available[a - lo:b - lo] = [t] * (b - a)

        i = lo
        while i < hi:
            if flushed:
                room = min_events - (i - max(buf_lo, taken))
                k = min(max(room, 0), hi - i)
                available[i - lo:i - lo + k] = times[i - lo:i - lo + k]
                i += k
                if k == room or room <= 0:
                    buf_lo, flushed, token, timer_due = i, False, token + 1, False
                continue
            if i == buf_lo:
                deadline, token, timer_due = times[i - lo] + timeout_s, token + 1, True
            to_min = buf_lo + min_events - i
            if to_min <= hi - i and times[i - lo + to_min - 1] <= deadline:
                j = i + to_min  # the buffer fills before its deadline
                visible(buf_lo, j, times[j - 1 - lo])
                buf_lo, flushed, token, timer_due = j, False, token + 1, False
                i = j
                continue
            before_deadline = bisect.bisect_right(times, deadline, i - lo, hi - lo) - (i - lo)
            if before_deadline < hi - i:
                j = i + before_deadline  # the timer fires while these lines are being read
                visible(buf_lo, j, deadline)
                flushed, token, timer_due = True, token + 1, False
                i = j
            else:
                i = hi
        self.available_at[lo:hi] = available
        self.buf_lo, self.buf_flushed, self.deadline, self.timer_token = buf_lo, flushed, deadline, token
        if timer_due:
            self.env.clock.at(deadline, self._timer, token)

    def _new_buffer(self, at: int) -> None:
        self.buf_lo = at
        self.buf_flushed = False
        self.timer_token += 1

    def _timer(self, token: int) -> None:
        if token != self.timer_token or self.buf_flushed:
            return
        self.available_at[self.buf_lo:self.inserted] = self.env.clock.now
        self.buf_flushed = True
        self.consumer.kick()

    def next_available(self) -> float:
        return float(self.available_at[self.taken]) if self.taken < self.inserted else math.inf

    def take(self, max_events: int, t_s: float) -> tuple[int, int]:
        """The output takes up to `max_events` visible events; returns the index range."""
        visible = int(np.searchsorted(self.available_at[self.taken:self.inserted], t_s, "right"))
        k = min(visible, max_events)
        lo = self.taken
        self.taken += k
        if k:
            self.in_flight.append([lo, self.taken, 0])
            if self.buf_flushed and self.taken >= self.inserted:
                self._new_buffer(self.taken)
        return lo, self.taken

    def ack(self, lo: int) -> None:
        for batch in self.in_flight:
            if batch[0] == lo:
                batch[2] = 1
                break
        freed = False
        while self.in_flight and self.in_flight[0][2]:
            self.acked = self.in_flight.popleft()[1]
            freed = True
        if freed:
            self.reader.wake()


class LumberjackOutput:
    """`output.logstash`: `worker` connections, each with `pipelining` batches in flight."""

    def __init__(self, env: Env, config: Config, queue: Source, downstream: Receiver) -> None:
        self.env = env
        self.queue = queue
        self.downstream = downstream
        self.in_flight = 0
        self.kick_at = math.inf
        self.paused_until = 0.0
        self.configure(config)

    def configure(self, config: Config) -> None:
        self.bulk = int(config["filebeat.output.bulk_max_size"])
        self.workers = int(config["filebeat.output.worker"])
        self.slots = self.workers * max(1, int(config["filebeat.output.pipelining"]))
        self.encoder_free = [0.0] * self.workers
        self.next_worker = 0

    def kick(self) -> None:
        """Try to send once the earliest waiting event is visible and a slot is free."""
        if self.in_flight >= self.slots:
            return
        clock = self.env.clock
        t = max(self.queue.next_available(), clock.now, self.paused_until)
        if t < self.kick_at:
            self.kick_at = t
            clock.at(t, self._send)

    def _send(self, _: object) -> None:
        env = self.env
        t = env.clock.now
        if t < self.kick_at:
            return
        self.kick_at = math.inf
        if t < self.paused_until:
            self.kick()
            return
        cal = env.calibration
        while self.in_flight < self.slots:
            lo, hi = self.queue.take(self.bulk, t)
            if hi == lo:
                break
            self.in_flight += 1
            w = self.next_worker
            self.next_worker = (w + 1) % self.workers
            cost = (cal.filebeat.cpu_per_batch_s + cal.filebeat.cpu_per_event_out_s * (hi - lo))
            cost *= env.cpu.slowdown(t) * env.jitter()
            env.cpu.charge("filebeat", t, cost)
            sent = max(t, self.encoder_free[w]) + cost
            self.encoder_free[w] = sent
            env.stamps.sent[lo:hi] = sent
            size = (hi - lo) * cal.event_bytes
            env.cpu.send(sent, packets_for(size, cal.network.mss_bytes))
            arrive = sent + cal.network.rtt_s / 2 + size / cal.network.bandwidth_bytes_per_s
            self.downstream.receive(lo, hi, arrive, w)
        self.kick()

    def acked(self, lo: int) -> None:
        self.in_flight -= 1
        self.queue.ack(lo)
        self.kick()
