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

`Twin` only assembles: it builds the shared `Env` and the parts from the sink up, each given the part it
hands work to (and the output the queue it pulls from), then `connect`s the parts that answer upstream
(the queue wakes the harvester and kicks the output; the receiver ACKs the output).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from models.canary import LatencyHistogram
from models.components import LOGSTASH, SPARK_SINK, TOPOLOGIES
from models.observation import Observation
from models.space import PIPELINE_SPACE, ChangeCost, Config
from models.twin.calibration import Calibration
from models.twin.core import Env, Stamps
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
STAGES["filebeat-kafka-spark"] = STAGES["filebeat-kafka"]  # the same stamps; its sink is a Spark job


class Twin:
    """The simulated pipeline, advanced window by window."""

    def __init__(self, config: Config, arrivals_s: np.ndarray, calibration: Calibration, *, seed: int,
                 multiline: bool = False, rotations_s: np.ndarray | None = None) -> None:
        write_s = np.asarray(arrivals_s, dtype=np.float64)
        if write_s.ndim != 1 or (write_s.size and (write_s[0] < 0 or np.any(np.diff(write_s) < 0))):
            raise ValueError("arrivals_s must be a sorted 1-D array of non-negative seconds")
        rng = np.random.default_rng(seed)  # drawn in this order: jitter, Spark's phase, scan phase, first poll
        self.env = env = Env.create(calibration, write_s, rng)
        self.config = config
        self.stages = STAGES[calibration.topology]
        env.cpu.charge_many("writer", write_s, calibration.writer.cpu_per_event_s)
        topology = TOPOLOGIES[calibration.topology]
        if topology.passes(SPARK_SINK):
            self.sink: SparkSink | ConsumerSink = SparkSink(env, config, float(rng.uniform()))
        else:
            self.sink = ConsumerSink(env, config)
            self.sink.start(0.0)
        if topology.passes(LOGSTASH):
            self.downstream: Logstash | DirectKafka = Logstash(env, config, self.sink)
        else:
            self.downstream = DirectKafka(env, self.sink)
        self.queue = MemQueue(env, config)
        self.output = LumberjackOutput(env, config, self.queue, self.downstream)
        scan_s = float(config["filebeat.scan_frequency"])
        rotations = np.asarray(rotations_s if rotations_s is not None else [], dtype=np.float64)
        self.harvester = Harvester(env, config, self.queue, rotations, multiline, float(rng.uniform(0, scan_s)))
        self.queue.connect(self.harvester, self.output)
        self.downstream.connect(self.output)
        self.harvester.start(float(rng.uniform(0, float(config["filebeat.backoff"]))))

    @property
    def stamps(self) -> Stamps:
        """When each event passed each point: what every observation is read from."""
        return self.env.stamps

    @property
    def now_s(self) -> float:
        return self.env.clock.now

    def run_until(self, t_s: float) -> None:
        """Advance simulated time to `t_s`."""
        self.env.clock.run_until(t_s)

    def apply(self, config: Config) -> float:
        """Switch to `config` now; returns the longest pause the change causes (0 for live changes)."""
        changed = [name for name in self.config.diff(config) if name in PIPELINE_SPACE]
        self.config = config
        now = self.env.clock.now
        cal = self.env.calibration
        self.harvester.configure(config)
        touched = {(PIPELINE_SPACE[n].component, PIPELINE_SPACE[n].cost) for n in changed}
        pauses = [0.0]
        if ("filebeat", ChangeCost.RESTART) in touched:
            pause = cal.filebeat.restart_s
            self.queue.configure(config)
            self.output.configure(config)
            self.output.paused_until = now + pause
            self.harvester.restart(now, pause, self.queue.restart())
            pauses.append(pause)
        if isinstance(self.downstream, Logstash) and any(c == "logstash" for c, _ in touched):
            self.downstream.configure(config)
            self.downstream.reload(now, cal.logstash.reload_s)
            pauses.append(cal.logstash.reload_s)
        sink_component = "spark" if isinstance(self.sink, SparkSink) else "kafka"
        if any(c == sink_component and cost == ChangeCost.RESTART for c, cost in touched):
            pause = cal.spark.restart_s if sink_component == "spark" else cal.consumer.restart_s
            self.sink.configure(config)
            self.sink.restart(now, pause)
            pauses.append(pause)
        return max(pauses)

    def observe(self, start_s: float, end_s: float) -> Observation:
        """What a live pipeline's telemetry would report for [start_s, end_s) (run that far first)."""
        if end_s > self.env.clock.now + 1e-9:
            raise ValueError(f"observe({start_s}, {end_s}) lies beyond the simulated time {self.env.clock.now}")
        return window_observation(self.stamps, self.stages, self.env.cpu, start_s, end_s,
                                  self.env.calibration.event_bytes)

    def latency_histogram(self, start_s: float, end_s: float, upper_bounds_s: Sequence[float]) -> LatencyHistogram:
        """The E2E latencies of the events that arrived in [start_s, end_s), in the probe's kind of buckets."""
        if end_s > self.env.clock.now + 1e-9:
            raise ValueError(
                f"latency_histogram({start_s}, {end_s}) lies beyond the simulated time {self.env.clock.now}")
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
