"""Serving the API with uvicorn: in the foreground (`pipetune api`) or in a thread of the daemon's process."""

from __future__ import annotations

import threading
import time
from typing import Mapping

import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from api.app import create_app
from controller.state import StateStore


def serve_in_thread(app: FastAPI, host: str, port: int, *, startup_timeout_s: float = 10.0,
                    ssl_certfile: str | None = None, ssl_keyfile: str | None = None) -> uvicorn.Server:
    """Start uvicorn on `host:port` (TLS with the files given) in a daemon thread; returns once it listens
    (set `should_exit` to stop it)."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile))
    thread = threading.Thread(target=server.run, name="pipetune-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start on {host}:{port} (port taken?)")
        time.sleep(0.05)
    return server


def serve_state_in_thread(store: StateStore, token: str, registries: Mapping[str, CollectorRegistry], host: str,
                          port: int, **ssl: str) -> uvicorn.Server:
    """Serve the API over `store` from a thread of this process, each pool's `/metrics` from its registry in
    `registries` (its daemon's)."""
    return serve_in_thread(create_app(store, token, registries), host, port, **ssl)
