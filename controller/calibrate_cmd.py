"""`pipetune calibrate`: measure the real testbed over a small design of configs and rates, fit the
twin's cost coefficients to it (`models.twin.fit`) and write a calibration file."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import typer
import yaml

from controller.measure_cmd import replay_and_observe
from controller.replay_cmd import Profile, build_schedule
from models.presets import preset
from models.space import PIPELINE_SPACE, Config, Value
from models.twin import Calibration, load
from models.twin.fit import Measurement, fit, twin_predictor
from testbed import lifecycle
from testbed.pipeline import DEFAULT_PIPELINE, PipelineError, PipelineSpec, load_pipeline
from testbed.processes import TestbedError

BASE_CALIBRATION = "local-filebeat-kafka"
TWIN_RUN_S = 15.0
# The low-latency corner (testbed/configs/low-latency.yaml) and one-change variants of it: each moves
# one coefficient's share of P95 (per-event reading, per-request cost, round trips, consumer work).
# No preset is among them, so the presets stay out-of-sample for bench/calibration.py.
LOW_LATENCY: dict[str, Value] = {"filebeat.backoff": 0.01, "filebeat.max_backoff": 0.05,
                                 "filebeat.queue.mem.flush.min_events": 0, "filebeat.queue.mem.flush.timeout": 0.0,
                                 "kafka.consumer.fetch.max.wait.ms": 10}
DESIGN: dict[str, dict[str, Value]] = {
    "low-latency": LOW_LATENCY,
    "ll-bulk50": {**LOW_LATENCY, "filebeat.output.bulk_max_size": 50},
    "ll-flush100ms": {**LOW_LATENCY, "filebeat.queue.mem.flush.min_events": 4096,
                      "filebeat.queue.mem.flush.timeout": 0.1},
    "ll-backoff250ms": {**LOW_LATENCY, "filebeat.backoff": 0.25, "filebeat.max_backoff": 0.25},
    "ll-sync": {**LOW_LATENCY, "filebeat.output.pipelining": 0, "filebeat.output.bulk_max_size": 200},
}


def design_config(changes: dict[str, Value]) -> Config:
    return PIPELINE_SPACE.config(changes, base=preset("defaults"))


def measure_live(spec: PipelineSpec, config: Config, rate_eps: float, duration_s: float, warmup_s: float,
                 seed: int = 0) -> Measurement:
    """Apply `config` to the running testbed, replay a steady `rate_eps` for `duration_s`, measure it."""
    schedule, _ = build_schedule(Profile.steady, rate_eps, duration_s, seed, False, None, None, None, None,
                                 1.0, 1.0, None, 0.5, "20:5")
    lifecycle.apply(spec, config)
    _, observation = replay_and_observe(spec, schedule, warmup_s)
    return Measurement(config, rate_eps, observation.p95_s, observation.throughput_eps)


def prime(spec: PipelineSpec, config: Config) -> None:
    """A short unmeasured run: a log new to Filebeat waits for its next scan (10 s by default)."""
    measure_live(spec, config, 100.0, 2.0, 0.0)


def calibration_yaml(calibration: Calibration, fitted: dict[str, float], points: int, loss: float) -> str:
    """The calibration as YAML shaped like `models/calibrations/*.yaml`, with a header naming the fit."""
    header = "".join(f"#   {key.replace('__', '.')} = {value:.4g}\n" for key, value in fitted.items())
    return (f"# Fitted by `pipetune calibrate` to {points} measurements (mean squared log error {loss:.3f}):\n"
            f"{header}# every other value is the base calibration's.\n"
            + yaml.safe_dump(asdict(calibration), sort_keys=False))


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, got {text!r}", param_hint="--rates") from None
    if not rates or any(r <= 0 for r in rates):
        raise typer.BadParameter(f"expected positive rates, got {text!r}", param_hint="--rates")
    return rates


def run_design(spec: PipelineSpec, names: Sequence[str], rates: Sequence[float], duration_s: float,
               warmup_s: float) -> list[Measurement]:
    prime(spec, design_config(DESIGN[names[0]]))
    measurements = []
    for name in names:
        for rate in rates:
            m = measure_live(spec, design_config(DESIGN[name]), rate, duration_s, warmup_s)
            typer.echo(f"{name:>16} @ {rate:>6g} ev/s: P95 {m.p95_s:.4g} s, throughput {m.throughput_eps:.5g} ev/s",
                       err=True)
            measurements.append(m)
    return measurements


def calibrate_command(
    pipeline: Path = typer.Option(DEFAULT_PIPELINE, "--pipeline", help="pipeline file (YAML) of a running testbed"),
    out: Path = typer.Option(Path("calibration-fitted.yaml"), "--out", help="where to write the calibration"),
    rates: str = typer.Option("1000,5000", "--rates", help="comma-separated steady rates (ev/s)"),
    duration: float = typer.Option(30.0, "--duration", help="replay length of each run (s)"),
    warmup: float = typer.Option(5.0, "--warmup", help="seconds of each run the latency ignores"),
    configs: str = typer.Option(",".join(DESIGN), "--configs", help="design configs to measure"),
    base: str = typer.Option(BASE_CALIBRATION, "--base", help="calibration whose other values are kept"),
    max_evals: int = typer.Option(40, "--max-evals", help="loss evaluations the fit may spend"),
) -> None:
    """Fit the twin's cost coefficients to measurements of the running testbed."""
    rate_list = parse_rates(rates)
    names = [n.strip() for n in configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in DESIGN]
    if unknown or not names:
        raise typer.BadParameter(f"unknown {unknown or 'empty'}; known: {', '.join(DESIGN)}", param_hint="--configs")
    if not 0 <= warmup < duration:
        raise typer.BadParameter(f"must be in [0, --duration), got {warmup:g}", param_hint="--warmup")
    try:
        base_calibration = load(base)
    except (KeyError, ValueError) as err:
        raise typer.BadParameter(str(err), param_hint="--base") from None
    try:
        spec = load_pipeline(pipeline)
        measurements = run_design(spec, names, rate_list, duration, warmup)
    except (PipelineError, TestbedError, TimeoutError) as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    # the twin reaches steady state within seconds: a shorter simulated run keeps the fit to minutes
    twin_s = min(duration, TWIN_RUN_S)
    result = fit(measurements, base_calibration, twin_predictor(twin_s, min(warmup, twin_s / 3)),
                 max_evals=max_evals)
    calibration = result.calibration.scaled(name=out.stem, topology="filebeat-kafka",
                                            description=f"fitted by pipetune calibrate to {pipeline.name}")
    out.write_text(calibration_yaml(calibration, result.values, len(measurements), result.loss))
    for key, value in result.values.items():
        typer.echo(f"{key.replace('__', '.'):>28} {value:.4g}")
    typer.echo(f"{'mean sq. log error':>28} {result.loss:.4f} ({result.evaluations} loss evaluations)")
    typer.echo(f"{'calibration':>28} {out}")
