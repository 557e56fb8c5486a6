"""Turn the twin's per-event stamps into the `Observation` a live pipeline's telemetry gives."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from models.observation import Observation
from models.twin.core import COMPONENTS, Cpu, Stamps

Stage = tuple[str, str, str]


def window_observation(stamps: Stamps, stages: Sequence[Stage], cpu: Cpu, start_s: float, end_s: float,
                       event_bytes: int | None = None) -> Observation:
    """Latency of events delivered in [start_s, end_s), rates, backlog at end_s, CPU, packets, and the Produce
    requests and bytes (at `event_bytes` an event; None: unknown) Kafka took in.

    As with the end-of-pipeline probe, latency is counted when an event arrives. A window in which
    nothing arrives while events wait reports the oldest wait as its latency (a lower bound).
    """
    duration = max(end_s - start_s, 1e-9)
    write, sink = stamps.write, stamps.sink
    written = int(np.searchsorted(write, end_s, "left"))
    offered = written - int(np.searchsorted(write, start_s, "left"))
    head = sink[:written]
    arrived = delivered(stamps, start_s, end_s)
    latency = head[arrived] - write[arrived]
    stage_mean: dict[str, float] = {}
    stage_p95: dict[str, float] = {}
    for name, begin, end in stages:
        spent = getattr(stamps, end)[arrived] - getattr(stamps, begin)[arrived]
        stage_mean[name] = float(spent.mean()) if spent.size else 0.0
        stage_p95[name] = float(np.percentile(spent, 95)) if spent.size else 0.0
    if latency.size:
        p50, p95, p99 = (float(v) for v in np.percentile(latency, [50, 95, 99]))
        mean = float(latency.mean())
    else:
        waiting = np.flatnonzero(np.isinf(head) | (head >= end_s))
        p50 = p95 = p99 = mean = float(end_s - write[waiting[0]]) if waiting.size else 0.0
    first, last = cpu.slot(start_s), cpu.slot(max(end_s - 1e-9, start_s)) + 1
    used = cpu.used(first, last) / duration
    cores = {name: float(u) for name, u in zip(COMPONENTS, used)}
    cores["background"] = cpu.background_cores
    requests, appended = produced(stamps, start_s, end_s)
    return Observation(
        duration_s=end_s - start_s,
        offered_eps=offered / duration,
        throughput_eps=arrived.size / duration,
        p50_s=p50, p95_s=p95, p99_s=p99, mean_s=mean,
        events_in=offered, events_out=int(arrived.size), lost_events=0,
        packets_per_s=cpu.packets(first, last) / duration,
        stage_p95_s=stage_p95, stage_mean_s=stage_mean,
        backlog_events=backlog(stamps, stages, end_s),
        cpu_cores=cores, busiest_cpu_share=sum(cores.values()) / cpu.cores,
        produce_requests_per_s=requests / duration,
        kafka_bytes_in_per_s=appended * event_bytes / duration if event_bytes is not None else None,
        series=per_second(stamps, stages, cpu, start_s, end_s),
    )


def delivered(stamps: Stamps, start_s: float, end_s: float) -> np.ndarray:
    """Indices of the events that arrived at the end of the pipeline in [start_s, end_s)."""
    head = stamps.sink[:int(np.searchsorted(stamps.write, end_s, "left"))]
    return np.flatnonzero((head >= start_s) & (head < end_s))


def produced(stamps: Stamps, start_s: float, end_s: float) -> tuple[int, int]:
    """The Produce requests Kafka appended in [start_s, end_s), and their events.

    A request appends a run of consecutive events at one time (`Stamps.kafka`), a time the next request's
    jitter makes its own: each run that starts in the window is a request. (Two requests appended at the
    very same time, possible only without jitter, count as one.)"""
    kafka = stamps.kafka[:int(np.searchsorted(stamps.write, end_s, "left"))]
    inside = (kafka >= start_s) & (kafka < end_s)
    starts = inside.copy()
    starts[1:] &= kafka[1:] != kafka[:-1]
    return int(np.count_nonzero(starts)), int(np.count_nonzero(inside))


def backlog(stamps: Stamps, stages: Sequence[Stage], t_s: float) -> dict[str, int]:
    """Events that entered each stage by `t_s` and have not left it."""
    written = int(np.searchsorted(stamps.write, t_s, "right"))
    passed = {"write": written}
    for _, _, end in stages:
        passed[end] = int(np.count_nonzero(getattr(stamps, end)[:written] <= t_s))
    return {name: passed[begin] - passed[end] for name, begin, end in stages}


def per_second(stamps: Stamps, stages: Sequence[Stage], cpu: Cpu, start_s: float,
               end_s: float) -> dict[str, list[float]]:
    """Per-second series: rates through each stamp, E2E p95/mean of arrivals, backlog, CPU, packets."""
    edges = start_s + np.arange(0, math.ceil(end_s - start_s - 1e-9) + 1, dtype=np.float64)
    edges[-1] = min(edges[-1], end_s) if edges.size > 1 else end_s
    widths = np.maximum(np.diff(edges), 1e-9)
    series: dict[str, list[float]] = {"t_s": edges[:-1].tolist()}
    points = ["write"] + [end for _, _, end in stages]
    counts = {}
    for point in points:
        counts[point] = _per_bin(getattr(stamps, point), edges)
        series[f"{'input' if point == 'write' else point}_eps"] = (counts[point] / widths).tolist()
    series["output_eps"] = series["sink_eps"]
    sink = stamps.sink
    arrived = np.flatnonzero((sink >= edges[0]) & (sink < edges[-1]))
    order = arrived[np.argsort(sink[arrived], kind="stable")]
    bins = np.searchsorted(edges, sink[order], "right") - 1
    bounds = np.searchsorted(bins, np.arange(edges.size))
    latency = sink[order] - stamps.write[order]
    p95, mean = [], []
    for b in range(edges.size - 1):
        chunk = latency[bounds[b]:bounds[b + 1]]
        p95.append(float(np.percentile(chunk, 95)) if chunk.size else math.nan)
        mean.append(float(chunk.mean()) if chunk.size else math.nan)
    series["p95_s"], series["mean_s"] = p95, mean
    for name, begin, end in stages:
        spent = getattr(stamps, end)[order] - getattr(stamps, begin)[order]
        sums = np.bincount(bins, weights=spent, minlength=edges.size)[: edges.size - 1]
        n = np.bincount(bins, minlength=edges.size)[: edges.size - 1]
        series[f"{name}_mean_s"] = np.where(n > 0, sums / np.maximum(n, 1), np.nan).tolist()
    in_total = np.cumsum(counts["write"]) + int(np.searchsorted(stamps.write, edges[0], "left"))
    out_total = np.cumsum(counts["sink"]) + int(np.count_nonzero(sink < edges[0]))
    series["backlog_events"] = (in_total - out_total).astype(float).tolist()
    slot_edges = [cpu.slot(float(e)) for e in edges]
    cores, packets = [], []
    for a, b, w in zip(slot_edges, slot_edges[1:], widths):
        cores.append(float(cpu.used(a, max(b, a + 1)).sum() / w + cpu.background_cores))
        packets.append(cpu.packets(a, max(b, a + 1)) / w)
    series["cpu_cores"], series["packets_per_s"] = cores, packets
    return series


def _per_bin(stamp: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How many stamps fall in each [edges[i], edges[i+1]) (edges one second apart but the last)."""
    inside = stamp[(stamp >= edges[0]) & (stamp < edges[-1])]
    bins = np.minimum((inside - edges[0]).astype(np.int64), edges.size - 2)
    return np.bincount(bins, minlength=edges.size - 1)
