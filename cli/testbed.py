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
from testbed.filebeat_layout import idle_glob, write_idle_files
from testbed.install import PrerequisiteError
from testbed.pipeline import (DEFAULT_PIPELINE, MAX_BROKERS, MAX_IDLE_FILES, MAX_NODES, NAMED_PIPELINES, PipelineError,
                              PipelineSpec, load_pipeline, pipeline_file)
from testbed.processes import TestbedError
from testbed.spark_sink import job_settings

testbed_app = typer.Typer(help="Run the real pipeline (Kafka, Filebeat, Prometheus, probe) on loopback.",
                          no_args_is_help=True)

PipelineOption = typer.Option(DEFAULT_PIPELINE, "--pipeline",
                              help=f"pipeline file (YAML), or a named one: {', '.join(NAMED_PIPELINES)} (paper: nginx "
                                   "-> Filebeat -> Kafka -> Spark -> Hive table)")


def _load(path: Path) -> PipelineSpec:
    try:
        return load_pipeline(path)
    except PipelineError as err:
        _fail(str(err))


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _print_status(spec: PipelineSpec) -> None:
    spec = lifecycle.recorded_spec(spec)
    rows = lifecycle.status(spec)
    if not rows:
        typer.echo(f"testbed {spec.name!r}: not started (run dir {spec.resolved_run_dir()})")
        return
    typer.echo(f"testbed {spec.name!r}: {spec.nodes} node(s), {spec.brokers} broker(s) "
               f"(run dir {spec.resolved_run_dir()})")
    for row in rows:
        state = f"running, pid {row.pid}" if row.pid else "stopped"
        typer.echo(f"  {row.name:<16} {state:<20} {row.endpoint}  log {row.log_file}")
    typer.echo("nodes:")
    for node in lifecycle.nodes_status(spec):
        agent_state = f"pid {node.agent_pid}" if node.agent_pid else "stopped"
        filebeat = f"filebeat pid {node.filebeat_pid}" if node.filebeat_pid else "filebeat stopped"
        typer.echo(f"  {node.name:<10} agent {node.agent_url} ({agent_state}), {filebeat}\n"
                   f"  {'':<10} log {node.log_path}")
    typer.echo(f"brokers: {spec.bootstrap} (replication factor {spec.replication_factor}, "
               f"min.insync.replicas {spec.min_insync_replicas})")
    typer.echo(f"  every Filebeat and broker change goes through the agents; each bearer token is in its node's "
               f"agent dir ({agent.token_file(spec)}, mode 0600)")
    try:
        with closing(live_pipeline(spec)) as pipeline:
            config = pipeline.current()
    except (OSError, PipelineUnavailable):
        return  # no agent to say what is in force
    changed = PIPELINE_SPACE.defaults().diff(config)
    text = ", ".join(f"{name}={new}" for name, (_, new) in changed.items()) or "the component defaults"
    typer.echo(f"  config in force: {text}")


@testbed_app.command()
def up(pipeline: Path = PipelineOption,
       nodes: int | None = typer.Option(None, "--nodes", help=f"Filebeat nodes, 1 to {MAX_NODES} "
                                                               "(default: the pipeline file's, else 1)"),
       brokers: int | None = typer.Option(None, "--brokers", help=f"Kafka brokers, 1 to {MAX_BROKERS} "
                                                                   "(default: the pipeline file's, else 1)"),
       idle_files: int | None = typer.Option(None, "--idle-files",
                                             help=f"idle rotated files beside each node's log (access.log.1 ...), "
                                                  f"which Filebeat's input globs match, 0 to {MAX_IDLE_FILES} "
                                                  "(default: the pipeline file's log.idle_files, else 0)")) -> None:
    """Install what is missing and start every component of the pipeline."""
    spec = _load(pipeline)
    try:
        spec = spec.sized(spec.nodes if nodes is None else nodes, spec.brokers if brokers is None else brokers)
        spec = spec if idle_files is None else spec.with_idle_files(idle_files)
        for node in spec.node_layouts():  # before Filebeat starts: its first scan finds them
            write_idle_files(node.log_path, spec.log.idle_files, spec.log.format)
        lifecycle.up(spec)
    except (PipelineError, TestbedError, PrerequisiteError) as err:
        _fail(str(err))
    _print_status(spec)
    if spec.log.idle_files:
        typer.echo(f"  {spec.log.idle_files} idle rotated files beside each node's log, which Filebeat's input "
                   f"matches with {idle_glob(spec.log_path()).name}")
    if spec.spark is not None:
        typer.echo(f"  Spark sink: {spec.spark.master}, trigger {spec.spark.trigger_interval_s:g} s, table "
                   f"{spec.spark.table} (warehouse, metastore, checkpoint under {job_settings(spec).home}); its "
                   f"`warehouse` stage, nginx's $msec -> the micro-batch committed, on {job_settings(spec).url}/metrics")
    written = write_deployment(spec, pipeline_file(pipeline))
    typer.echo(f"  deployment file: {written} (`pipetune autotune --pipeline {written}` tunes it, with replay)")


@testbed_app.command()
def down(pipeline: Path = PipelineOption) -> None:
    """Stop exactly what `up` started."""
    spec = _load(pipeline)
    stopped = lifecycle.down(spec)
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing of this testbed was running")


@testbed_app.command()
def status(pipeline: Path = PipelineOption) -> None:
    """Say what runs, where, with which config: every node (agent, Filebeat, log) and every broker."""
    _print_status(_load(pipeline))
