"""Logstash 7.17 (beats input, memory queue, pipeline workers, kafka output) and the Kafka broker.

Semantics and sources:
- Beats input (logstash-input-beats): one thread per connection decodes a whole lumberjack window
  before its events are pushed; the window is ACKed once every event is in the queue, so a full
  queue holds the ACK back and Filebeat's pipelining slots stay taken (backpressure).
- Memory queue: holds at most pipeline.workers x pipeline.batch.size events (Logstash reference,
  "Memory queue size"); a push into a full queue blocks.
- Workers (`LsQueueUtils.drain`): a worker drains what is queued, then polls for one more event for at
  most pipeline.batch.delay; the wait restarts after each event, and the batch goes when it holds
  batch.size events or a poll times out. Filters and outputs run in the worker thread.
- Kafka output (logstash-integration-kafka `retrying_send`): the worker sends every record of its
  batch and blocks until all futures complete. Producer: records fill batches of `batch_size` bytes;
  a full batch is sendable at once, a partial one after `linger_ms` (a lone record waits the whole
  linger); at most max.in.flight requests per connection; acks=0 completes on send, acks=1 on the
  leader's append, acks=all adds the replication wait.
- Approximation: pushes keep write order across connections (a later window waits for an earlier one).
"""

from __future__ import annotations

from models.space import Config
from models.twin.core import Env, packets_for
from models.twin.ports import Sender, Sink


class Logstash:
    """Beats input, memory queue and workers with their Kafka producer.

    The sender it ACKs (Filebeat's output, which is built on this receiver) is given by `connect`."""

    sender: Sender

    def __init__(self, env: Env, config: Config, sink: Sink) -> None:
        self.env = env
        self.sink = sink
        self.conn_free: dict[int, float] = {}
        self.ready: dict[int, tuple[int, int]] = {}  # next index to push -> (window's first index, end)
        self.pushed = 0  # events [taken, pushed) are in the memory queue
        self.taken = 0
        self.collecting: list[int] | None = None  # [first index, count] of the batch a worker is filling
        self.gap_token = 0
        self.paused_until = 0.0
        self.configure(config)
        self.idle = self.workers

    def connect(self, sender: Sender) -> None:
        self.sender = sender

    def configure(self, config: Config) -> None:
        old = getattr(self, "workers", None)
        self.workers = int(config["logstash.pipeline.workers"])
        self.batch_size = int(config["logstash.pipeline.batch.size"])
        self.delay_s = float(config["logstash.pipeline.batch.delay"]) / 1000.0
        self.linger_s = float(config["logstash.output.kafka.linger_ms"]) / 1000.0
        self.producer_batch_bytes = int(config["logstash.output.kafka.batch_size"])
        self.acks = str(config["logstash.output.kafka.acks"])
        if old is not None:
            self.idle += self.workers - old

    def reload(self, t_s: float, pause_s: float) -> None:
        """Pipeline reload: inputs stop and no batch starts until the new pipeline runs."""
        self.paused_until = t_s + pause_s
        self.env.clock.at(self.paused_until, lambda _: self._step())

    def capacity(self) -> int:
        return self.workers * self.batch_size

    # -- beats input ---------------------------------------------------------------------------
    def receive(self, lo: int, hi: int, arrive_s: float, conn: int) -> None:
        env = self.env
        cal = env.calibration.logstash
        start = max(arrive_s, self.conn_free.get(conn, 0.0))
        cost = (cal.cpu_per_request_s + cal.cpu_decode_per_event_s * (hi - lo)) * env.cpu.slowdown(start) * env.jitter()
        env.cpu.charge("logstash", start, cost)
        done = start + cost + cal.request_latency_s
        self.conn_free[conn] = done
        env.clock.at(done, self._decoded, (lo, hi))

    def _decoded(self, window: tuple[int, int]) -> None:
        self.ready[window[0]] = window
        self._step()

    def _push(self) -> bool:
        env = self.env
        t = env.clock.now
        moved = False
        while self.pushed in self.ready and t >= self.paused_until:
            space = self.capacity() - (self.pushed - self.taken)
            if space <= 0:
                break
            first, hi = self.ready.pop(self.pushed)
            k = min(space, hi - self.pushed)
            env.stamps.ls_in[self.pushed:self.pushed + k] = t
            self.pushed += k
            moved = True
            if self.pushed < hi:
                self.ready[self.pushed] = (first, hi)
            else:
                env.clock.at(t + env.calibration.network.rtt_s / 2, self.sender.acked, first)
        return moved

    # -- workers -------------------------------------------------------------------------------
    def _step(self) -> None:
        while self._push() | self._feed():
            pass

    def _feed(self) -> bool:
        t = self.env.clock.now
        moved = False
        while t >= self.paused_until:
            queued = self.pushed - self.taken
            if self.collecting is not None:
                batch = self.collecting
                k = min(queued, self.batch_size - batch[1])
                self.taken += k
                batch[1] += k
                moved = moved or k > 0
                if batch[1] == self.batch_size or self.delay_s <= 0:
                    self.collecting = None
                    self._start(batch[0], batch[1])
                    continue
                if k:
                    self.gap_token += 1
                    self.env.clock.at(t + self.delay_s, self._gap, self.gap_token)
                break
            if self.idle > 0 and queued > 0:
                self.idle -= 1
                self.collecting = [self.taken, 0]
                continue
            break
        return moved

    def _gap(self, token: int) -> None:
        if token != self.gap_token or self.collecting is None:
            return
        batch, self.collecting = self.collecting, None
        self._start(batch[0], batch[1])
        self._step()

    def _free(self, _: object) -> None:
        self.idle += 1
        self._step()

    def _start(self, lo: int, n: int) -> None:
        env = self.env
        cal = env.calibration.logstash
        t = env.clock.now
        cost = (cal.cpu_per_batch_s + cal.cpu_per_event_s * n) * env.cpu.slowdown(t) * env.jitter()
        env.cpu.charge("logstash", t, cost)
        filtered = t + cost
        env.stamps.ls_out[lo:lo + n] = filtered
        done = self._produce(lo, n, filtered)
        env.clock.at(done, self._free)

    def _produce(self, lo: int, n: int, t_s: float) -> float:
        """Send records [lo, lo+n) from `t_s`; stamp their broker append; return when all are acked."""
        env = self.env
        cal = env.calibration
        kafka = cal.kafka
        per_batch = max(1, self.producer_batch_bytes // cal.event_bytes)
        slowdown = env.cpu.slowdown(t_s)
        half_rtt = cal.network.rtt_s / 2
        extra = kafka.replication_s if self.acks == "all" else 0.0
        acked: list[float] = []
        segments = []
        for start in range(lo, lo + n, per_batch):
            records = min(per_batch, lo + n - start)
            send = t_s + (self.linger_s if records < per_batch else 0.0)
            if len(acked) >= kafka.max_in_flight:
                send = max(send, acked[-kafka.max_in_flight])
            broker = (kafka.cpu_per_request_s + kafka.cpu_per_record_s * records) * slowdown * env.jitter()
            env.cpu.charge("logstash", send, kafka.producer_cpu_per_request_s)
            env.cpu.charge("kafka", send, broker)
            env.cpu.send(send, packets_for(records * cal.event_bytes, cal.network.mss_bytes))
            append = send + half_rtt + broker
            env.stamps.kafka[start:start + records] = append
            segments.append((append, start, start + records))
            acked.append(send if self.acks == "0" else append + half_rtt + extra)
        self.sink.add(segments)
        return max(acked)


class DirectKafka:
    """Filebeat's `output.kafka` straight to the broker (no Logstash): the broker ACKs each request.

    The sender it ACKs is given by `connect`, as for `Logstash`."""

    sender: Sender

    def __init__(self, env: Env, sink: Sink) -> None:
        self.env = env
        self.sink = sink

    def connect(self, sender: Sender) -> None:
        self.sender = sender

    def receive(self, lo: int, hi: int, arrive_s: float, conn: int) -> None:
        env = self.env
        cal = env.calibration
        broker = (cal.kafka.cpu_per_request_s + cal.kafka.cpu_per_record_s * (hi - lo)) * env.cpu.slowdown(arrive_s)
        env.cpu.charge("kafka", arrive_s, broker)
        append = arrive_s + broker * env.jitter()
        env.stamps.kafka[lo:hi] = append
        self.sink.add([(append, lo, hi)])
        env.clock.at(append + cal.network.rtt_s / 2, self.sender.acked, lo)

