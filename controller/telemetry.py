"""Telemetry of a live pipeline, read back from Prometheus (prometheus-api-client).

The probe exports everything scraped here: latency histograms by stage, events consumed, the log's
events written, Filebeat's counters, the consumer's lag. A window is summarised with `increase()`
over exactly the window, so percentiles are those of the events that arrived in it. A window
Prometheus cannot be asked about, or holds no samples of the probe for, is `TelemetryMissing`.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Callable, Protocol

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect

from controller.pipelines import PipelineUnavailable
from models.observation import Observation

HISTOGRAM = "pipetune_e2e_latency_seconds"
SERIES_RATE_WINDOW_S = 5  # per-second series are rates over this many seconds


class TelemetryMissing(PipelineUnavailable):
    """The telemetry cannot be read, or holds nothing of the pipeline, for a window."""


class TelemetrySource(Protocol):
    def window(self, start: float, end: float) -> Observation:
        """The window [start, end] summarised; `TelemetryMissing` when it cannot be."""
        ...


class PrometheusTelemetry:
    """A `TelemetrySource` over the Prometheus that scrapes the probe."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = PrometheusConnect(url=url, disable_ssl=True)

    def _ask(self, query: Callable[[], list]) -> list:
        try:
            return query()
        except (requests.RequestException, PrometheusApiClientException) as err:
            raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): {err}") from err

    def scalar(self, query: str, at: float) -> float:
        """The query's single value at epoch second `at` (NaN when Prometheus has none)."""
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{at:.3f}"}))
        return float(result[0]["value"][1]) if result else math.nan

    def by_label(self, query: str, label: str, at: float) -> dict[str, float]:
        result = self._ask(lambda: self.client.custom_query(query, params={"time": f"{at:.3f}"}))
        return {row["metric"].get(label, ""): float(row["value"][1]) for row in result}

    def series(self, query: str, start: float, end: float) -> list[float]:
        """The query's values at every second of [start, end] (NaN where missing)."""
        rows = self._ask(lambda: self.client.custom_query_range(query, start_time=_dt(start), end_time=_dt(end),
                                                                 step="1s"))
        values = {round(float(t)): float(v) for t, v in rows[0]["values"]} if rows else {}
        return [values.get(t, math.nan) for t in range(math.ceil(start), math.floor(end) + 1)]

    def window(self, start: float, end: float) -> Observation:
        """Latency percentiles, rates, backlog, CPU and request rate over [start, end]."""
        w = f"{max(round(end - start), 1)}s"
        seconds = max(end - start, 1e-9)
        # The probe exports these counters from its start, so no sample of them means no telemetry at all.
        written = self.scalar(f"increase(pipetune_log_events_written_total[{w}])", end)
        consumed = self.scalar(f"increase(pipetune_events_total[{w}])", end)
        for name, value in (("pipetune_log_events_written_total", written), ("pipetune_events_total", consumed)):
            if math.isnan(value):
                raise TelemetryMissing(f"telemetry (Prometheus at {self.url}): no samples of {name} in the window")
        e2e = f'increase({HISTOGRAM}_bucket{{stage="e2e"}}[{w}])'
        quantile = {q: self.scalar(f"histogram_quantile({q}, sum by (le) ({e2e}))", end) for q in (0.5, 0.95, 0.99)}
        count = self.scalar(f'increase({HISTOGRAM}_count{{stage="e2e"}}[{w}])', end)
        total = self.scalar(f'increase({HISTOGRAM}_sum{{stage="e2e"}}[{w}])', end)
        stages = f"increase({HISTOGRAM}_bucket{{stage!=\"e2e\"}}[{w}])"
        stage_p95 = self.by_label(f"histogram_quantile(0.95, sum by (le, stage) ({stages}))", "stage", end)
        stage_mean = self.by_label(f"increase({HISTOGRAM}_sum{{stage!=\"e2e\"}}[{w}]) / "
                                   f"increase({HISTOGRAM}_count{{stage!=\"e2e\"}}[{w}])", "stage", end)
        lost = self.scalar(f"increase(pipetune_lost_events_total[{w}])", end)
        batches = self.scalar(f"increase(pipetune_filebeat_output_batches_total[{w}])", end)
        bytes_per_event = self.scalar("pipetune_log_written_bytes_total / pipetune_log_events_written_total", end)
        backlog = {
            "log": self.scalar("pipetune_log_unshipped_bytes", end) / bytes_per_event,
            "filebeat": self.scalar("pipetune_filebeat_queue_events", end),
            "kafka": self.scalar("pipetune_kafka_consumer_lag_events", end),
        }
        cpu = self.by_label(f"rate(pipetune_component_cpu_seconds_total[{w}])", "component", end)
        cpu["probe"] = self.scalar(f"rate(process_cpu_seconds_total[{w}])", end)
        rate = f"[{SERIES_RATE_WINDOW_S}s]"
        series = {
            "t_s": [float(t) for t in range(math.ceil(start), math.floor(end) + 1)],
            "input_eps": self.series(f"rate(pipetune_log_events_written_total{rate})", start, end),
            "output_eps": self.series(f"rate(pipetune_events_total{rate})", start, end),
            "p95_s": self.series(f"histogram_quantile(0.95, sum by (le) "
                                 f"(rate({HISTOGRAM}_bucket{{stage=\"e2e\"}}{rate})))", start, end),
        }
        return Observation(
            duration_s=end - start, offered_eps=written / seconds, throughput_eps=consumed / seconds,
            p50_s=quantile[0.5], p95_s=quantile[0.95], p99_s=quantile[0.99],
            mean_s=total / count if count > 0 else math.nan,
            events_in=round(written), events_out=round(consumed), lost_events=round(_num(lost)),
            packets_per_s=_num(batches) / seconds, stage_p95_s=stage_p95, stage_mean_s=stage_mean,
            backlog_events={k: round(v) for k, v in backlog.items() if math.isfinite(v)},
            cpu_cores={k: v for k, v in cpu.items() if math.isfinite(v)}, series=series,
        )


def _num(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)
