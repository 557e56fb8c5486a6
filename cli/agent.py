"""`pipetune agent run --config agent.yaml` runs the node agent's HTTP service (loopback, or off it over TLS;
`pipetune agent --config ...` still works); `pipetune agent init` writes an agent.yaml for what the node runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
import typer
import uvicorn
from typer.core import TyperGroup

from agents.adapter import DiskFull
from agents.config import AgentConfigError, load_agent_config
from agents.filebeat.patch import InputSelector
from agents.init import DEFAULT_PORT, METRICS_TOKEN, InitError, init
from agents.service import create_app
from cli.listening import INSECURE_HTTP, TLS_CERT, TLS_KEY, tls_options

TOKEN_ENV = "PIPETUNE_AGENT_TOKEN"


def _read_token(token_file: Path, flag: str) -> str:
    try:
        token = token_file.read_text().strip()
    except OSError as err:
        raise typer.BadParameter(f"cannot read {token_file}: {err.strerror}", param_hint=flag) from None
    if not token:
        raise typer.BadParameter(f"{token_file} is empty", param_hint=flag)
    return token


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        return _read_token(token_file, "--token-file")
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise typer.BadParameter(f"set {TOKEN_ENV} or give --token-file", param_hint="--token-file")
    return token


def agent_command(
    config: Path = typer.Option(..., "--config", help="agent.yaml: state dir, listen port, managed components"),
    token_file: Path | None = typer.Option(None, "--token-file", help=f"file holding the bearer token (else ${TOKEN_ENV})"),
    metrics_token_file: Path | None = typer.Option(None, "--metrics-token-file",
                                                   help="file holding a token that reads GET /metrics only"),
    tls_cert: Path | None = TLS_CERT,
    tls_key: Path | None = TLS_KEY,
    insecure_http: bool = INSECURE_HTTP,
) -> None:
    """Run the node agent: change Filebeat, Logstash and Kafka safely (validate, apply, health, roll back)."""
    token = _token(token_file)
    metrics_token = _read_token(metrics_token_file, "--metrics-token-file") if metrics_token_file else None
    if metrics_token == token:
        raise typer.BadParameter("must differ from the agent's token", param_hint="--metrics-token-file")
    try:
        agent_config = load_agent_config(config)
        scheme, ssl = tls_options(agent_config.host, tls_cert, tls_key, insecure_http, "pipetune agent")
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        app = create_app(agent_config, token, metrics_token=metrics_token)
    except AgentConfigError as err:  # agent.yaml, or a component's own file it names
        raise typer.BadParameter(str(err), param_hint="--config") from None
    except DiskFull as err:  # its state directory, or a component's files, as it brings them to their version
        typer.echo(f"pipetune agent: cannot start: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"pipetune agent: {len(agent_config.components)} components, "
               f"listening on {scheme}://{agent_config.host}:{agent_config.port}", err=True)
    uvicorn.run(app, host=agent_config.host, port=agent_config.port, log_level="warning", **ssl)


def init_command(
    filebeat_config: Path = typer.Option(..., "--filebeat-config", help="the filebeat.yml Filebeat runs with"),
    filebeat_binary: Path | None = typer.Option(None, "--filebeat-binary", help="the filebeat binary (else: on PATH)"),
    input_id: list[str] = typer.Option([], "--input-id", help="a filestream input to tune, by its id (repeatable)"),
    input_path: list[str] = typer.Option([], "--input-path", help="a log input to tune, by a glob over its paths"),
    logstash_settings: Path | None = typer.Option(None, "--logstash-settings", help="Logstash's path.settings"),
    pipeline_id: str | None = typer.Option(None, "--pipeline-id", help="the pipelines.yml entry to tune"),
    output_id: str | None = typer.Option(None, "--output-id", help="the id of the kafka output to tune"),
    kafka_bootstrap: str | None = typer.Option(None, "--kafka-bootstrap", help="HOST:PORT of the broker on this node"),
    out: Path = typer.Option(Path("pipetune-agent"), "--out", help="where agent.yaml, the token and the state go"),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=1, max=65535, help="the port the agent listens on"),
) -> None:
    """Look at what this node runs; write agent.yaml and 0600 tokens; print what the agent will manage."""
    selectors = [InputSelector(id=i) for i in input_id] + [InputSelector(path_glob=g) for g in input_path]
    try:
        agent_yaml, token, summary = init(out, filebeat_config, filebeat_binary, selectors,
                                          logstash_settings=logstash_settings, pipeline_id=pipeline_id,
                                          output_id=output_id, kafka_bootstrap=kafka_bootstrap, port=port)
    except InitError as err:
        typer.echo(f"pipetune agent init: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo("\n".join(summary))
    metrics_token = token.with_name(METRICS_TOKEN)
    typer.echo(f"wrote {agent_yaml}, {token} and {metrics_token} (0600, the second for Prometheus: it reads "
               f"/metrics only): pipetune agent run --config {agent_yaml} --token-file {token} "
               f"--metrics-token-file {metrics_token}")


class _RunByDefault(TyperGroup):
    """`pipetune agent --config ...`, the form from before `init`, is `pipetune agent run --config ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] != "--help":
            args = ["run", *args]
        return super().parse_args(ctx, args)


agent_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True, help="The node agent: run it, or write its agent.yaml.")
agent_app.command("run")(agent_command)
agent_app.command("init")(init_command)
