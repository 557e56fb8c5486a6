"""`pipetune testbed up|down|status`: the real components on this machine."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import NoReturn

import typer

from controller.pipelines import PipelineUnavailable
from models.space import PIPELINE_SPACE
from testbed import agent, lifecycle
from testbed.endpoints import live_pipeline, write_deployment
from testbed.install import PrerequisiteError
from testbed.pipeline import DEFAULT_PIPELINE, PipelineError, PipelineSpec, load_pipeline
from testbed.processes import TestbedError

testbed_app = typer.Typer(help="Run the real pipeline (Kafka, Filebeat, Prometheus, probe) on loopback.",
                          no_args_is_help=True)

PipelineOption = typer.Option(DEFAULT_PIPELINE, "--pipeline", help="pipeline file (YAML)")


def _load(path: Path) -> PipelineSpec:
    try:
        return load_pipeline(path)
    except PipelineError as err:
        _fail(str(err))


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _print_status(spec: PipelineSpec) -> None:
    rows = lifecycle.status(spec)
    if not rows:
        typer.echo(f"testbed {spec.name!r}: not started (run dir {spec.resolved_run_dir()})")
        return
    typer.echo(f"testbed {spec.name!r} (run dir {spec.resolved_run_dir()})")
    for row in rows:
        state = f"running, pid {row.pid}" if row.pid else "stopped"
        typer.echo(f"  {row.name:<10} {state:<20} {row.endpoint}  log {row.log_file}")
    if any(row.name == "agent" for row in rows):
        typer.echo(f"  agent {agent.agent_url(spec)}: every Filebeat and broker change goes through it; "
                   f"its bearer token is in {agent.token_file(spec)} (mode 0600)")
    try:
        with closing(live_pipeline(spec)) as pipeline:
            config = pipeline.current()
    except (OSError, PipelineUnavailable):
        return  # no agent to say what is in force
    changed = PIPELINE_SPACE.defaults().diff(config)
    text = ", ".join(f"{name}={new}" for name, (_, new) in changed.items()) or "the component defaults"
    typer.echo(f"  config in force: {text}")


@testbed_app.command()
def up(pipeline: Path = PipelineOption) -> None:
    """Install what is missing and start every component of the pipeline."""
    spec = _load(pipeline)
    try:
        lifecycle.up(spec)
    except (TestbedError, PrerequisiteError) as err:
        _fail(str(err))
    _print_status(spec)
    written = write_deployment(spec, pipeline)
    typer.echo(f"  deployment file: {written} (`pipetune autotune --pipeline {written}` tunes it, with replay)")


@testbed_app.command()
def down(pipeline: Path = PipelineOption) -> None:
    """Stop exactly what `up` started."""
    spec = _load(pipeline)
    stopped = lifecycle.down(spec)
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing of this testbed was running")


@testbed_app.command()
def status(pipeline: Path = PipelineOption) -> None:
    """Say what runs, where, with which config."""
    _print_status(_load(pipeline))
