"""PNG plots of a scenario study: E2E over time, Baseline stage breakdown, throughput per stage, burst."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from models.paper_scenarios import SCENARIOS, StudyResult  # noqa: E402

LABELS = {s.name: s.label for s in SCENARIOS}
RATE_POINTS = (("input_eps", "written"), ("read_eps", "Filebeat read"), ("sent_eps", "Filebeat sent"),
               ("ls_out_eps", "Logstash out"), ("kafka_eps", "Kafka append"), ("sink_eps", "sink"))


def write_plots(result: StudyResult, folder: Path) -> list[Path]:
    """Write every plot the study has data for; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if result.series:
        written.append(_e2e(result, folder / "e2e_over_time.png"))
        written.append(_throughput(result, folder / "throughput_per_stage.png"))
    if "baseline" in result.series:
        written.append(_stages(result, folder / "baseline_stages.png"))
    if result.burst_series:
        written.append(_burst(result, folder / "burst.png"))
    return written


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _e2e(result: StudyResult, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    for name, series in result.series.items():
        ax.plot(series["t_s"], series["p95_s"], label=LABELS[name], lw=1)
    ax.set(xlabel="time since start (s)", ylabel="E2E P95 of events arriving that second (s)",
           title=f"E2E latency over time ({result.rate_eps:g} ev/s, first repetition)")
    ax.axvline(result.duration_s, color="grey", ls=":", lw=1)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def _stages(result: StudyResult, path: Path) -> Path:
    series = result.series["baseline"]
    names = [k[: -len("_mean_s")] for k in series if k.endswith("_mean_s") and k != "mean_s"]
    fig, ax = plt.subplots(figsize=(10, 5))
    values = [_hold(series[f"{n}_mean_s"]) for n in names]
    ax.stackplot(series["t_s"], values, labels=names)
    ax.set(xlabel="time since start (s)", ylabel="mean seconds spent, by stage",
           title="Baseline: where an event's E2E latency goes (paper Fig. 3)")
    ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)


def _hold(values: list[float]) -> list[float]:
    """Carry the last value over seconds in which nothing arrived (NaN), which stackplot cannot draw."""
    out, last = [], 0.0
    for v in values:
        last = last if v != v else v
        out.append(last)
    return out


def _throughput(result: StudyResult, path: Path) -> Path:
    names = list(result.series)
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.2 * len(names)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        series = result.series[name]
        for key, label in RATE_POINTS:
            if key in series:
                ax.plot(series["t_s"], series[key], label=label, lw=0.9)
        ax.set_ylabel("ev/s")
        ax.set_title(LABELS[name], fontsize=9)
    axes[0, 0].legend(fontsize=7, ncol=len(RATE_POINTS))
    axes[-1, 0].set_xlabel("time since start (s)")
    return _save(fig, path)


def _burst(result: StudyResult, path: Path) -> Path:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for name, series in result.burst_series.items():
        top.plot(series["t_s"], series["sink_eps"], label=f"{LABELS[name]} output", lw=1)
        bottom.plot(series["t_s"], series["p95_s"], label=LABELS[name], lw=1)
    first = next(iter(result.burst_series.values()))
    top.plot(first["t_s"], first["input_eps"], color="black", lw=0.8, label="offered")
    top.set(ylabel="ev/s", title="Burst check: load x2 in the middle of the run")
    bottom.set(xlabel="time since start (s)", ylabel="E2E P95 (s)")
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    return _save(fig, path)
