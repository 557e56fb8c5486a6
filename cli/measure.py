"""`pipetune measure`: set a config on the running testbed, replay a workload through it, report
the observation (latency percentiles, rates, lost and duplicated events) and a PNG time series."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
import yaml

from cli.replay import build
from models.observation import Observation
from models.presets import PRESETS, preset_as_taken
from models.space import Config, ParamError
from replay.profiles import GENERATED, Profile, WorkloadSpec
from testbed import lifecycle
from testbed.harness import replay_and_observe
from testbed.pipeline import DEFAULT_PIPELINE, PipelineError, load_pipeline
from testbed.processes import TestbedError


def resolve_config(choice: str) -> Config:
    """A preset name, or a YAML file holding `{preset: NAME, set: {param: value}}` or `{param: value}`; as the agents
    take it (`preset_as_taken`: the paper's Hybrid sets a 10 ms scan_frequency beside Filebeat's default backoffs,
    which Filebeat's rule forbids), saying on stderr what was moved."""
    if choice in PRESETS:
        return _taken(choice, {})
    path = Path(choice)
    if not path.is_file():
        raise typer.BadParameter(f"{choice!r} is neither a preset ({', '.join(PRESETS)}) nor a file",
                                 param_hint="--config")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError("expected a mapping")
        named = raw.get("preset", "defaults") if "set" in raw or "preset" in raw else "defaults"
        changes = raw.get("set", {}) if "set" in raw or "preset" in raw else raw
        return _taken(named, changes)
    except (yaml.YAMLError, ValueError, KeyError) as err:
        raise typer.BadParameter(f"{path}: {err}", param_hint="--config") from None


def _taken(named: str, changes: dict) -> Config:
    config, moved = preset_as_taken(named, changes)
    if moved:
        typer.echo(f"{named}: out of its components' order with values it does not set; measured with "
                   + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moved.items()), err=True)
    return config


def plot_series(observation: Observation, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = observation.series
    t0 = series["t_s"][0] if series.get("t_s") else 0.0
    t = [x - t0 for x in series.get("t_s", [])]
    fig, (rates, latency) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    rates.plot(t, series["input_eps"], label="written to the log")
    rates.plot(t, series["output_eps"], label="consumed by the probe")
    rates.set_ylabel("events/s")
    rates.legend(loc="lower right")
    latency.plot(t, series["p95_s"], color="tab:red", label="P95 E2E (5 s window)")
    latency.set_ylabel("seconds")
    latency.set_xlabel("seconds into the measured window (after --warmup)")
    latency.legend(loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def measure_command(
    pipeline: Path = typer.Option(DEFAULT_PIPELINE, "--pipeline", help="pipeline file (YAML)"),
    profile: Profile = typer.Option(Profile.steady, "--profile", help="arrival process (not trace or stages)"),
    rate: float = typer.Option(1000.0, "--rate", help="offered events per second"),
    duration: float = typer.Option(60.0, "--duration", help="replay length in seconds"),
    config: str = typer.Option("defaults", "--config", help="a preset (defaults, hybrid, latency, ...) or a YAML file"),
    warmup: float = typer.Option(0.0, "--warmup", help="seconds of the run whose arrivals the latency ignores"),
    seed: int = typer.Option(0, "--seed"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the result as JSON here"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG time series (default: measure-<run>.png beside --json, else in the testbed's run dir)"),
) -> None:
    """Measure the live pipeline under one config and one workload."""
    if profile not in GENERATED:
        raise typer.BadParameter(f"measure replays generated profiles; use {', '.join(p.value for p in GENERATED)}",
                                 param_hint="--profile")
    if not 0 <= warmup < duration:
        raise typer.BadParameter(f"must be in [0, --duration), got {warmup:g}", param_hint="--warmup")
    chosen = resolve_config(config)
    schedule = build(WorkloadSpec(profile, rate, duration, seed)).schedule
    try:
        spec = load_pipeline(pipeline)
        done = lifecycle.apply(spec, chosen)
    except (PipelineError, TestbedError, ParamError) as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    typer.echo(f"config {config}: {done}", err=True)
    try:
        run, observation = replay_and_observe(spec, schedule, warmup)
    except TimeoutError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    result = {"p50_s": observation.p50_s, "p95_s": observation.p95_s, "p99_s": observation.p99_s,
              "offered_eps": observation.offered_eps, "throughput_eps": observation.throughput_eps,
              "lost_events": run.report.lost_events, "duplicate_events": run.report.duplicate_events,
              "config": config, "run_id": run.run_id, "stage_p95_s": observation.stage_p95_s,
              "late_events": run.report.late_events}
    for key in ("p50_s", "p95_s", "p99_s", "offered_eps", "throughput_eps"):
        typer.echo(f"{key:>16} {result[key]:.4g}")
    typer.echo(f"{'lost/dup/late':>16} {run.report.lost_events}/{run.report.duplicate_events}/{run.report.late_events}"
               f" of {run.events}")
    typer.echo(f"{'stage p95 (s)':>16} " + ", ".join(f"{k} {v:.3g}" for k, v in observation.stage_p95_s.items()))
    # Beside the run's other files: the JSON asked for, else the testbed's run directory.
    png = plot or (json_out.parent if json_out else spec.resolved_run_dir()) / f"measure-{run.run_id}.png"
    plot_series(observation, f"{config} @ {rate:g} ev/s ({profile.value})", png)
    typer.echo(f"{'time series':>16} {png}")
    if json_out:
        json_out.write_text(json.dumps(result, indent=1))
