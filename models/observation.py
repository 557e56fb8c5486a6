"""What one measurement window of a pipeline says, the same whether the twin or a live pipeline made it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from models.clock_offset import ClockOffset
from models.disturbance import Disturbance


# parts in `cpu_cores` that run beside the pipeline, not in it: the load, pipetune's own, the OS
NOT_THE_PIPELINE = ("writer", "probe", "prometheus", "background")


@dataclass
class Observation:
    """End-to-end latency, rates, backlog and resource use over one window.

    Latencies are seconds from the event's write (`ts_nginx`) to its arrival at the end of the
    pipeline. `stage_p95_s` and `backlog_events` are keyed by stage name (the paper's stages where
    the pipeline has them). `series` holds per-second time series (`t_s`, `input_eps`, `output_eps`,
    `p95_s`, ...) as plain lists.
    """

    duration_s: float
    offered_eps: float
    throughput_eps: float
    p50_s: float
    p95_s: float
    p99_s: float
    mean_s: float
    events_in: int = 0
    events_out: int = 0
    lost_events: int = 0
    # the twin: network packets per second, as the paper counts them; live: Filebeat's output batches per second
    packets_per_s: float = 0.0
    stage_p95_s: dict[str, float] = field(default_factory=dict)
    stage_mean_s: dict[str, float] = field(default_factory=dict)
    backlog_events: dict[str, int] = field(default_factory=dict)
    # CPU seconds per second each part used, by name: the managed components ("filebeat", "logstash"), the
    # twin's "writer", "kafka", "sink" and "background" (the OS), each live broker ("broker-<id>"), and
    # pipetune's own ("probe", "prometheus").
    cpu_cores: dict[str, float] = field(default_factory=dict)
    # The busiest node's CPU time over its cores (every process on it, not only the pipeline's): how much of
    # the capacity the window used. None: no node reports its cores.
    busiest_cpu_share: float | None = None
    # What the window cost the Kafka cluster, as its brokers count it: Produce requests and bytes in per second,
    # summed over the brokers. None: the brokers do not export it (a shared cluster pays for every tuned node).
    produce_requests_per_s: float | None = None
    kafka_bytes_in_per_s: float | None = None
    series: dict[str, list[float]] = field(default_factory=dict)
    # The step of the latencies: the coarsest of the stamps' clock and the first bucket of the histogram they were
    # read from (1 ms or more on a live pipeline); 0: exact (the twin's).
    latency_resolution_s: float = 0.0
    clock_offsets: dict[str, ClockOffset] = field(default_factory=dict)  # each node's clock minus the controller's
    # The standard deviation of `p95_s` where the measurement says it (a canary's judgement has an interval);
    # None: a plain window, whose noise the learner estimates from repeated windows.
    p95_sd_s: float | None = None
    # What the Kafka cluster did in the window that its figures measure instead of the config (a broker lost,
    # leaders moved, replicas out of sync): such a window is not judged. None: a steady cluster, or one not read.
    disturbance: Disturbance | None = None
    # Events a micro-batch sink (a Spark job) holds at the window's end while it keeps up, where the window's output
    # is what it committed (live: the offered rate × the mean time an event spends in it, Little's law): its output
    # comes a batch at a time, so a window's end may cut one. 0: the output is counted as it flows (the probe's).
    sink_held_events: float = 0.0
    # Events the window's two counts (input, output) may place on different sides of its edges (live: each count
    # comes from its own target, scraped on its own phase, so up to a scrape interval of events lands in the window
    # for one and not the other; where the rate moved across the window, a lull starting, that is the interval × how
    # far it moved). 0: counted at the same instants (the twin's).
    edge_events: float = 0.0

    @property
    def throughput_ratio(self) -> float:
        """Output rate over offered rate (1.0 when nothing was offered)."""
        return self.throughput_eps / self.offered_eps if self.offered_eps > 0 else 1.0

    def shortfall_allowed(self, min_ratio: float, buffered_events: float) -> float:
        """Events a window's output may fall short of its input and still count as keeping up.

        The policy's share, plus what a window's end can cut out of the output of a pipeline that keeps
        up: the `buffered_events` its config holds back (Filebeat ships in flush-sized batches), trusted
        only up to the policy's share again, so a pipeline whose batches outlast the window is not excused;
        and what the counts may misplace at the window's edges (`edge_events`).
        """
        tolerated = (1.0 - min_ratio) * self.offered_eps * self.duration_s
        return tolerated + min(max(buffered_events, 0.0), tolerated) + self.edge_events

    @property
    def backlog_total(self) -> int:
        return int(sum(self.backlog_events.values()))

    @property
    def pipeline_cpu_cores(self) -> float:
        return pipeline_cpu_cores(self.cpu_cores)


def pipeline_cpu_cores(cpu_cores: Mapping[str, float]) -> float:
    """The CPU the pipeline's own parts used, cores, from CPU by part (`Observation.cpu_cores`): every part but
    the load's writer, pipetune's probe and the node's background: what a config costs the node and the cluster
    it runs on. NaN: no part of the pipeline reported it."""
    spent = [cores for part, cores in cpu_cores.items() if part not in NOT_THE_PIPELINE]
    return float(sum(spent)) if spent else float("nan")
