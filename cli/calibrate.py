"""`pipetune calibrate`: measure the real testbed over a small design of configs and rates, fit the
twin's cost coefficients to it (`models.twin.fit`) and write a calibration file."""

from __future__ import annotations

from pathlib import Path

import typer

from models.twin import load
from models.twin.fit import Measurement, fit, twin_predictor
from testbed.calibration_design import DESIGN, calibration_yaml, run_design
from testbed.pipeline import DEFAULT_PIPELINE, PipelineError, load_pipeline
from testbed.processes import TestbedError

BASE_CALIBRATION = "local-filebeat-kafka"
TWIN_RUN_S = 15.0


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, got {text!r}", param_hint="--rates") from None
    if not rates or any(r <= 0 for r in rates):
        raise typer.BadParameter(f"expected positive rates, got {text!r}", param_hint="--rates")
    return rates


def _report(name: str, m: Measurement) -> None:
    typer.echo(f"{name:>16} @ {m.rate_eps:>6g} ev/s: P95 {m.p95_s:.4g} s, throughput {m.throughput_eps:.5g} ev/s",
               err=True)


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
        measurements = run_design(spec, names, rate_list, duration, warmup, _report)
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
