"""`Twin`: one continuous simulated run whose config may change between windows.

    twin = Twin(config, arrivals_s, calibration, seed=1)
    twin.run_until(60.0); first = twin.observe(0.0, 60.0)
    pause_s = twin.apply(new_config)          # live / reload / restart, as the real components do
    twin.run_until(120.0); second = twin.observe(60.0, 120.0)

State carries over between windows: queues, backlog, in-flight batches, harvester backoff. Applying
a config follows each parameter's `ChangeCost`: live settings take effect at once; a Logstash
setting reloads its pipeline (no batch starts for `logstash.reload_s`); a Filebeat queue/output
setting restarts Filebeat (reading pauses for `filebeat.restart_s` and resumes from the last event
the output took, so nothing acknowledged or in flight is lost); a sink setting restarts the sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from models.canary import LatencyHistogram
from models.observation import Observation
from models.space import PIPELINE_SPACE, ChangeCost, Config
from models.twin.calibration import Calibration
from models.twin.core import Clock, Cpu, Jitter
from models.twin.filebeat import Harvester, LumberjackOutput, MemQueue
from models.twin.logstash import DirectKafka, Logstash
from models.twin.observe import delivered, window_observation
from models.twin.sink import ConsumerSink, SparkSink

STAGES: dict[str, tuple[tuple[str, str, str], ...]] = {
    # (stage name, stamp it starts at, stamp it ends at); the paper's Table 3 stages
    "paper": (("nginx->filebeat", "write", "read"), ("filebeat", "read", "sent"),
              ("filebeat->logstash", "sent", "ls_in"), ("logstash", "ls_in", "ls_out"),
              ("logstash->kafka", "ls_out", "kafka"), ("kafka->sink", "kafka", "sink")),
    "filebeat-kafka": (("nginx->filebeat", "write", "read"), ("filebeat", "read", "sent"),
                       ("filebeat->kafka", "sent", "kafka"), ("kafka->sink", "kafka", "sink")),
}


@dataclass
class Stamps:
    """When each event passed each point (inf: not yet). Index = write order."""

    write: np.ndarray
    read: np.ndarray
    sent: np.ndarray
    ls_in: np.ndarray
    ls_out: np.ndarray
    kafka: np.ndarray
    sink: np.ndarray

    @classmethod
    def empty(cls, write_s: np.ndarray) -> "Stamps":
        n = write_s.size
        return cls(write_s, *(np.full(n, np.inf) for _ in range(6)))


class Twin:
    """The simulated pipeline, advanced window by window."""

    def __init__(self, config: Config, arrivals_s: np.ndarray, calibration: Calibration, *, seed: int,
                 multiline: bool = False, rotations_s: np.ndarray | None = None) -> None:
        write_s = np.asarray(arrivals_s, dtype=np.float64)
        if write_s.ndim != 1 or (write_s.size and (write_s[0] < 0 or np.any(np.diff(write_s) < 0))):
            raise ValueError("arrivals_s must be a sorted 1-D array of non-negative seconds")
        rng = np.random.default_rng(seed)
        self.cal = calibration
        self.config = config
        self.write_s = write_s
        self.n = write_s.size
        self.stages = STAGES[calibration.topology]
        horizon_s = float(write_s[-1]) + 120.0 if self.n else 120.0
        node = calibration.node
        self.clock = Clock()
        self.cpu = Cpu(node.cores, node.background_cores, node.slowdown_slice_s, horizon_s)
        self.jitter = Jitter(rng, calibration.jitter_cv)
        self.stamps = Stamps.empty(write_s)
        self._charge_writer()
        self.queue = MemQueue(self)
        self.output = LumberjackOutput(self)
        self.downstream = Logstash(self) if calibration.topology == "paper" else DirectKafka(self)
        if calibration.topology == "paper":
            self.sink: SparkSink | ConsumerSink = SparkSink(self, float(rng.uniform()))
        else:
            self.sink = ConsumerSink(self)
            self.sink.start(0.0)
        scan_s = float(config["filebeat.scan_frequency"])
        rotations = np.asarray(rotations_s if rotations_s is not None else [], dtype=np.float64)
        self.harvester = Harvester(self, rotations, multiline, float(rng.uniform(0, scan_s)))
        self.harvester.start(float(rng.uniform(0, float(config["filebeat.backoff"]))))

    def _charge_writer(self) -> None:
        self.cpu.charge_many(0, self.write_s, self.cal.writer.cpu_per_event_s)

    @property
    def now_s(self) -> float:
        return self.clock.now

    def appended(self, segments: list[tuple[float, int, int]]) -> None:
        """Records [lo, hi) of each (append time, lo, hi) have broker append stamps (some in the future)."""
        self.sink.add(segments)

    def run_until(self, t_s: float) -> None:
        """Advance simulated time to `t_s`."""
        self.clock.run_until(t_s)

    def apply(self, config: Config) -> float:
        """Switch to `config` now; returns the longest pause the change causes (0 for live changes)."""
        changed = [name for name in self.config.diff(config) if name in PIPELINE_SPACE]
        self.config = config
        now = self.clock.now
        self.harvester.configure(config)
        touched = {(PIPELINE_SPACE[n].component, PIPELINE_SPACE[n].cost) for n in changed}
        pauses = [0.0]
        if ("filebeat", ChangeCost.RESTART) in touched:
            pause = self.cal.filebeat.restart_s
            self.queue.configure(config)
            self.output.configure(config)
            self.output.paused_until = now + pause
            self.harvester.restart(now, pause, self.queue.restart())
            pauses.append(pause)
        if isinstance(self.downstream, Logstash) and any(c == "logstash" for c, _ in touched):
            self.downstream.configure(config)
            self.downstream.reload(now, self.cal.logstash.reload_s)
            pauses.append(self.cal.logstash.reload_s)
        sink_component = "spark" if isinstance(self.sink, SparkSink) else "kafka"
        if any(c == sink_component and cost == ChangeCost.RESTART for c, cost in touched):
            pause = self.cal.spark.restart_s if sink_component == "spark" else self.cal.consumer.restart_s
            self.sink.configure(config)
            self.sink.restart(now, pause)
            pauses.append(pause)
        return max(pauses)

    def observe(self, start_s: float, end_s: float) -> Observation:
        """What a live pipeline's telemetry would report for [start_s, end_s) (run that far first)."""
        if end_s > self.clock.now + 1e-9:
            raise ValueError(f"observe({start_s}, {end_s}) lies beyond the simulated time {self.clock.now}")
        return window_observation(self.stamps, self.stages, self.cpu, start_s, end_s)

    def latency_histogram(self, start_s: float, end_s: float, upper_bounds_s: Sequence[float]) -> LatencyHistogram:
        """The E2E latencies of the events that arrived in [start_s, end_s), in the probe's kind of buckets."""
        if end_s > self.clock.now + 1e-9:
            raise ValueError(f"latency_histogram({start_s}, {end_s}) lies beyond the simulated time {self.clock.now}")
        arrived = delivered(self.stamps, start_s, end_s)
        return LatencyHistogram.of(self.stamps.sink[arrived] - self.stamps.write[arrived], upper_bounds_s)


def steady_arrivals(rate_eps: float, duration_s: float) -> np.ndarray:
    """Evenly spaced write times at `rate_eps` for `duration_s` (what `replay.arrivals.steady` gives
    without Poisson; `models` cannot import `replay`)."""
    return (np.arange(int(round(rate_eps * duration_s))) + 0.5) / rate_eps


def simulate(config: Config, arrivals_s: np.ndarray, calibration: Calibration, *, seed: int,
             multiline: bool = False, rotations_s: np.ndarray | None = None,
             until_s: float | None = None) -> tuple[Observation, Twin]:
    """Run `arrivals_s` through the twin until `until_s` (default: last arrival + 60 s) and observe it all."""
    twin = Twin(config, arrivals_s, calibration, seed=seed, multiline=multiline, rotations_s=rotations_s)
    end = until_s if until_s is not None else (float(arrivals_s[-1]) if len(arrivals_s) else 0.0) + 60.0
    twin.run_until(end)
    return twin.observe(0.0, end), twin
