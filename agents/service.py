"""The agent's HTTP service: components, their config versions, health, rollback and audit log, and the
node's own metrics at /metrics (what is appended to the harvested files and not yet shipped).

Every request carries `Authorization: Bearer <token>`: none → 401, a wrong one → 403. The token is
compared in constant time and never logged. An optional metrics token reads `GET /metrics` and nothing
else (403 anywhere else): the scraper's copy of a token, in Prometheus's config, cannot change the node.
"""

from __future__ import annotations

import hmac
import socket
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import AsyncIterator

import docker
import yaml
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field

from agents.adapter import Adapter, ConfigStore, Runtime
from agents.component import ChangeRefused, ManagedComponent
from agents.config import (AgentConfig, AgentConfigError, Component, DockerRuntimeSpec, FilebeatComponent,
                           GivenValue, KafkaBrokerComponent, KafkaConsumerComponent, KafkaProducerComponent,
                           LogstashComponent, SparkQueryComponent)
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.exporter import FilebeatCollector
from agents.filebeat.patch import InputSelector, discover
from agents.filebeat.registry import registry_offsets
from agents.filebeat.source_watch import SourceWatch, filebeat_data_dir, message_max_bytes, watched_sources
from agents.heartbeat import HeartbeatWriter
from agents.kafka.broker import KafkaBrokerAdapter
from agents.kafka.client import KafkaConsumerAdapter, KafkaProducerAdapter
from agents.logstash.adapter import LogstashAdapter
from agents.process_stats import NodeCpuCollector
from agents.runtimes import DockerRuntime, ProcessRuntime
from agents.spark import SparkQueryAdapter

# The HTTP status of each change outcome: a rejected config wrote nothing (422); a rolled-back one
# reached the component and failed there (502). A refusal that is not an outcome carries its own status
# (`ChangeRefused`: 409 held or a version conflict, 422 a value out of range, 507 no space left on a device).
_STATUS = {"applied": 200, "unchanged": 200, "rejected": 422, "rolled_back": 502}


# The statuses each request may answer with (the OpenAPI schema says them; tests/faults/test_bad_input.py holds the
# agent to it). A refusal's body names what is refused: `message`, and `field` for a value (FastAPI's own 422 names
# it in `detail[].loc`), `held` for a key edited by hand, `path` for a full disk.
_AUTH = {401: {"description": "no bearer token"},
         403: {"description": "a wrong token, or the metrics token anywhere but GET /metrics"}}
_NAMED = {404: {"description": "no component of that name on this agent"}}
_REFUSED = {409: {"description": "the component is held (`held` names the key, file and line)"},
            507: {"description": "no space left on a device (`path` names it); nothing written, the version not used"},
            502: {"description": "the component failed and was rolled back (`status: rolled_back`)"}}
_CHANGE = _REFUSED | {
    400: {"description": "a body that cannot be read at all (bytes that are not text)"},
    409: {"description": "`version` not above `highest_version` or reused for other values (`field`: version), or "
                         "the component held (`held` names the key, file and line)"},
    422: {"description": "a body that is not JSON, a value out of range or unknown (`field`, `allowed`), or rejected "
                         "by the component's own check (`status: rejected`)"}}
_ROLLBACK = _REFUSED | {409: {"description": "no earlier version, or the component held (`held`)"}}


class ChangeRequest(BaseModel):
    # at most a JSON number's exact integers (2^53): a longer one would name a version file no filesystem takes
    version: int = Field(ge=1, le=2**53, description="the caller's version number; above every version stored")
    params: dict[str, GivenValue] = Field(description="parameter name -> value; others keep the value in force")


def build_adapter(spec: Component, state_dir: Path, runtime: Runtime | None = None) -> Adapter:
    """The adapter a component entry of agent.yaml describes (`runtime`: the one its health may ask)."""
    if isinstance(spec, FilebeatComponent):
        selectors = [InputSelector(id=s.id, path_glob=s.path) for s in spec.inputs]
        adapter = FilebeatAdapter(spec.config, selectors, spec.binary, http_port=spec.http_port, runtime=runtime)
        adapter.data_dir = _filebeat_data_dir(spec)  # once its files read well: filebeat.yml may say where it is
        return adapter
    if isinstance(spec, LogstashComponent):
        return LogstashAdapter(spec.settings_dir, spec.pipeline_id, spec.output_id, spec.binary, api_port=spec.api_port)
    if isinstance(spec, KafkaConsumerComponent):
        return KafkaConsumerAdapter(spec.name, spec.properties, spec.health_url)
    if isinstance(spec, KafkaProducerComponent):
        return KafkaProducerAdapter(spec.name, spec.properties, spec.health_url, runtime)
    if isinstance(spec, SparkQueryComponent):
        return SparkQueryAdapter(spec.name, spec.properties, spec.url, reload_timeout_s=spec.reload_timeout_s)
    assert isinstance(spec, KafkaBrokerComponent)
    return KafkaBrokerAdapter(spec.bootstrap, spec.broker_id, state_dir / spec.name / "rendered",
                              visible_timeout_s=spec.visible_timeout_s, name=spec.name)


def build_runtime(spec: Component, state_dir: Path) -> Runtime | None:
    """The runtime of a component entry; None for a component changed only through its admin API."""
    if isinstance(spec, (KafkaBrokerComponent, SparkQueryComponent)):
        return None  # changed through its admin API, or its own /reload: no process of the agent's
    runtime = spec.runtime
    if isinstance(runtime, DockerRuntimeSpec):
        return DockerRuntime(docker.DockerClient(base_url=runtime.docker_host), runtime.container,
                             reload_signal=runtime.reload_signal, stop_timeout_s=runtime.stop_timeout_s)
    argv = runtime.argv or _default_argv(spec)
    return ProcessRuntime(spec.name, argv, state_dir / spec.name / "run", reload_signal=runtime.reload_signal,
                          stop_timeout_s=runtime.stop_timeout_s)


def _default_argv(spec: Component) -> list[str]:
    if isinstance(spec, FilebeatComponent):
        # -c's directory is path.config, as the adapter reads the input files `filebeat.config.inputs` names.
        return [str(spec.binary), "-c", str(spec.config), "--path.config", str(spec.config.parent)]
    assert isinstance(spec, LogstashComponent)
    if spec.binary is None:
        raise ValueError(f"components {spec.name}: give runtime.argv or binary to start Logstash")
    return [str(spec.binary), "--path.settings", str(spec.settings_dir)]


def _filebeat_data_dir(spec: FilebeatComponent) -> Path | None:
    """The path.data of a Filebeat the agent runs itself; None for a container's, kept at a path of its own."""
    if isinstance(spec.runtime, DockerRuntimeSpec):
        return None
    return filebeat_data_dir(spec.config, spec.runtime.argv or _default_argv(spec))


def build_components(config: AgentConfig) -> dict[str, ManagedComponent]:
    """Each component of agent.yaml over its files; `AgentConfigError` naming the component (and the file and line
    its adapter names) when one cannot be used."""
    components = {}
    for i, spec in enumerate(config.components):
        try:
            runtime = build_runtime(spec, config.state_dir)
            adapter = build_adapter(spec, config.state_dir, runtime)
        except (ValueError, OSError, yaml.YAMLError) as err:
            raise AgentConfigError(f"components.{i} ({spec.name}): {err}") from None
        components[spec.name] = ManagedComponent(adapter, runtime, ConfigStore(config.state_dir, spec.name),
                                                  spec.params, health_timeout_s=config.health_timeout_s,
                                                  settle_s=config.settle_s)
    return components


def heartbeat_writer(agent_config: AgentConfig) -> HeartbeatWriter | None:
    """The heartbeat writer agent.yaml asks for (its sequence kept in the state directory), or None."""
    spec = agent_config.canary
    if spec is None:
        return None
    return HeartbeatWriter(spec.path, spec.node or socket.gethostname(), spec.canary_eps,
                           agent_config.state_dir / "canary")


def node_metrics(config: AgentConfig) -> CollectorRegistry:
    """The agent's own metrics: per Filebeat, what is appended to the files its tuned inputs harvest and
    not yet shipped (`SourceWatch`), and its output counters when it serves its stats; and the node's CPU."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCpuCollector())
    for spec in config.components:
        if not isinstance(spec, FilebeatComponent):
            continue
        files = discover(spec.config, [InputSelector(id=s.id, path_glob=s.path) for s in spec.inputs])
        # Without a registry (a container's Filebeat) the backlog counts from the agent's start.
        data_dir = _filebeat_data_dir(spec)
        registry.register(SourceWatch(watched_sources(files.inputs),
                                      (lambda d=data_dir: registry_offsets(d)) if data_dir else None,
                                      message_max_bytes(files)))
        if spec.http_port is not None:
            registry.register(FilebeatCollector(f"http://127.0.0.1:{spec.http_port}/stats"))
    return registry


def create_app(agent_config: AgentConfig, token: str, components: dict[str, ManagedComponent] | None = None,
               *, metrics_token: str | None = None) -> FastAPI:
    """The agent's FastAPI app; components are started (brought to their current version) on startup.
    `metrics_token`, when given, reads /metrics only."""
    if not token:
        raise ValueError("the agent needs a non-empty token")
    if metrics_token is not None and (not metrics_token or metrics_token == token):
        raise ValueError("the metrics token must be non-empty and differ from the agent's token")
    managed = components if components is not None else build_components(agent_config)
    metrics = node_metrics(agent_config)
    for component in managed.values():
        component.start()
    bearer = HTTPBearer(auto_error=False)

    @asynccontextmanager
    async def supervised(_: FastAPI) -> AsyncIterator[None]:
        """While the agent serves, a component that stops outside a change is restarted on its version."""
        stop = threading.Event()

        def supervise() -> None:
            while not stop.wait(agent_config.supervise_interval_s):
                for component in managed.values():
                    component.keep_running()

        thread = threading.Thread(target=supervise, name="pipetune-agent-supervisor", daemon=True)
        thread.start()
        heartbeat = heartbeat_writer(agent_config)
        if heartbeat is not None:
            heartbeat.start()
        yield
        if heartbeat is not None:
            heartbeat.stop()
        stop.set()
        thread.join()

    def authorised(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if credentials is None:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        given = credentials.credentials.encode()
        if hmac.compare_digest(given, token.encode()):
            return
        if metrics_token is not None and hmac.compare_digest(given, metrics_token.encode()):
            if request.method == "GET" and request.url.path == "/metrics":
                return
            raise HTTPException(403, "the metrics token reads GET /metrics only")
        raise HTTPException(403, "wrong token")

    app = FastAPI(title="pipetune agent", dependencies=[Depends(authorised)], lifespan=supervised, responses=_AUTH)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, err: RequestValidationError) -> JSONResponse:
        """422 naming each field (`loc`) and what is wrong with it; the input is not echoed back (a NaN in it would
        not even encode as JSON)."""
        return JSONResponse({"detail": [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                                        for e in err.errors()]}, status_code=422)

    def component(name: str) -> ManagedComponent:
        if name not in managed:
            raise HTTPException(404, f"no component {name!r}; this agent manages {', '.join(managed)}")
        return managed[name]

    @app.get("/clock")
    def clock() -> dict:
        """This node's clock, for the controller's offset estimate (NTP-style: it times the round trip)."""
        return {"time_s": time.time()}

    @app.get("/components")
    def list_components() -> list[dict]:
        return [c.state() for c in managed.values()]

    @app.get("/components/{name}", responses=_NAMED)
    def get_component(name: str) -> dict:
        return component(name).state()

    @app.put("/components/{name}/config", responses=_NAMED | _CHANGE)
    def put_config(name: str, request: ChangeRequest) -> JSONResponse:
        try:
            result = component(name).change(request.version, request.params)
        except ChangeRefused as refused:
            return JSONResponse(refused.detail, status_code=refused.status)
        return JSONResponse(asdict(result), status_code=_STATUS[result.status])

    @app.post("/components/{name}/rollback", responses=_NAMED | _ROLLBACK)
    def rollback(name: str) -> JSONResponse:
        try:
            return JSONResponse(asdict(component(name).rollback()))
        except ChangeRefused as refused:
            return JSONResponse(refused.detail, status_code=refused.status)

    @app.get("/components/{name}/audit", responses=_NAMED)
    def audit(name: str) -> list[dict]:
        return component(name).audit()

    @app.get("/metrics", response_class=Response,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}})
    def prometheus_metrics() -> Response:
        """Prometheus text format; scraped with the metrics token (or the agent's), `authorization.credentials_file`."""
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    return app
