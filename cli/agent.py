"""`pipetune agent --config agent.yaml`: run the node agent's HTTP service (loopback, or off it over TLS)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
import uvicorn

from agents.config import AgentConfigError, load_agent_config
from agents.service import create_app
from cli.listening import INSECURE_HTTP, TLS_CERT, TLS_KEY, tls_options

TOKEN_ENV = "PIPETUNE_AGENT_TOKEN"


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as err:
            raise typer.BadParameter(f"cannot read {token_file}: {err.strerror}", param_hint="--token-file") from None
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise typer.BadParameter(f"set {TOKEN_ENV} or give --token-file", param_hint="--token-file")
    return token


def agent_command(
    config: Path = typer.Option(..., "--config", help="agent.yaml: state dir, listen port, managed components"),
    token_file: Path | None = typer.Option(None, "--token-file", help=f"file holding the bearer token (else ${TOKEN_ENV})"),
    tls_cert: Path | None = TLS_CERT,
    tls_key: Path | None = TLS_KEY,
    insecure_http: bool = INSECURE_HTTP,
) -> None:
    """Run the node agent: change Filebeat, Logstash and Kafka safely (validate, apply, health, roll back)."""
    token = _token(token_file)
    try:
        agent_config = load_agent_config(config)
    except AgentConfigError as err:
        raise typer.BadParameter(str(err), param_hint="--config") from None
    scheme, ssl = tls_options(agent_config.host, tls_cert, tls_key, insecure_http, "pipetune agent")
    app = create_app(agent_config, token)
    typer.echo(f"pipetune agent: {len(agent_config.components)} components, "
               f"listening on {scheme}://{agent_config.host}:{agent_config.port}", err=True)
    uvicorn.run(app, host=agent_config.host, port=agent_config.port, log_level="warning", **ssl)
