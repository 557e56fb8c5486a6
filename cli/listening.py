"""Applying the off-loopback rule (`models.listening`) at a command's start: exit 2, warn, or uvicorn's TLS options."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from models.listening import ListenFlags, decide_listening


def tls_options(host: str, tls_cert: Optional[Path], tls_key: Optional[Path], insecure_http: bool,
                what: str, flags: ListenFlags = ListenFlags()) -> tuple[str, dict[str, Any]]:
    """The scheme and uvicorn's ssl keyword arguments for serving `what` on `host`; exit 2 when refused.

    The warning for plain HTTP off loopback goes to stderr at every start, by design."""
    decision = decide_listening(host, tls_cert, tls_key, insecure_http, flags)
    if decision.action == "refuse":
        typer.secho(f"error: {what}: {decision.message}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)
    if decision.action == "warn":
        typer.secho(f"{what}: {decision.message}", fg=typer.colors.YELLOW, err=True)
    for flag, path in ((flags.cert, tls_cert), (flags.key, tls_key)):
        if path is not None and not path.is_file():
            typer.secho(f"error: {what}: {flag} {path}: no such file", fg=typer.colors.RED, err=True)
            raise typer.Exit(2)
    ssl = {"ssl_certfile": str(tls_cert), "ssl_keyfile": str(tls_key)} if tls_cert is not None else {}
    return decision.scheme, ssl


TLS_CERT = typer.Option(None, "--tls-cert", help="PEM certificate (chain) to serve HTTPS with; needed off loopback.")
TLS_KEY = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert (keep it mode 0600).")
INSECURE_HTTP = typer.Option(False, "--insecure-http",
                             help="Serve plain HTTP off loopback anyway (warned at every start; the token still applies).")
