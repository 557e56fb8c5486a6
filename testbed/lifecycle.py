"""Bring the testbed up, down, and say what runs: Kafka (one broker or a cluster), Prometheus, then the node
agents, each of which starts its node's Filebeat (the first node's also the probe) and makes every
Filebeat, broker and consumer change.

`up` records what it started in `<run dir>/state.json`; `down` stops exactly those processes (by
pid file, checked against the kernel's start time), the agent first so it cannot restart Filebeat or
the probe. What is in force is the agent's to say: `apply` goes through the same `LivePipeline` the
daemon drives.
"""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable

from controller.pipelines import PipelineUnavailable
from models.space import Config
from testbed import agent, processes
from testbed.endpoints import live_pipeline
from testbed.filebeat_layout import filebeat_layout, filebeat_pid_file
from testbed.install import Installed, install_all
from testbed.kafka import brokers_ready, create_topics, kafka_services
from testbed.pipeline import NodeLayout, PipelineSpec
from testbed.probe import probe_service
from testbed.nginx_source import REQUEST_LOG_FORMAT, nginx_service
from testbed.processes import Service, TestbedError
from testbed.prometheus import prometheus_service, prometheus_url, scraped
from testbed.spark_sink import job_settings, spark_service
from testbed.spark_sink import ready as spark_ready

# The order `down` stops processes in, by name (`agent`, `agent-node-2`, `kafka-3`, ...): the agents first,
# so they cannot restart Filebeat or the probe; the brokers last.
STOP = ("nginx", "agent", "filebeat", "probe", "spark", "prometheus", "kafka")


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    endpoint: str
    log_file: Path


@dataclass(frozen=True)
class NodeStatus:
    """One node of a running testbed: its agent, its Filebeat and the log it ships."""

    name: str
    agent_url: str
    agent_pid: int | None
    filebeat_pid: int | None
    log_path: Path


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1.0) as response:
        return response.status == 200


def _start_ready(group: list[Service], ready: Callable[[Service], bool], timeout_s: float) -> None:
    """Start every service of `group`, then wait until each answers (a KRaft quorum forms only once all its
    voters run; Kafka can take several seconds)."""
    for service in group:
        processes.start(service)
    for service in group:
        processes.wait_ready(service, partial(ready, service), timeout_s)


def _answers(url: str) -> bool:
    """Whether `url` answers without an error (nginx answers the testbed's requests with 204)."""
    with urllib.request.urlopen(url, timeout=1.0) as response:
        return response.status < 400


def _agent_ready(spec: PipelineSpec, node: NodeLayout) -> bool:
    """An agent answers once it has started its components (Filebeat healthy; on the first node also the
    probe healthy and the broker configs set)."""
    with agent.client(spec, node) as client:
        return all(component["health"]["ok"] for component in client.components())


def _endpoints(spec: PipelineSpec) -> dict[str, str]:
    out = {b.service_name: f"{b.host}:{b.port}" for b in spec.broker_layouts()}
    out |= {"prometheus": prometheus_url(spec), "probe": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics"}
    for node in spec.node_layouts():
        out[spec.node_process(node, "filebeat")] = f"http://127.0.0.1:{node.filebeat_http_port}/stats"
        out[spec.node_process(node, "agent")] = node.agent_url
        if spec.nginx is not None:
            out[_nginx_name(node)] = f"http://127.0.0.1:{spec.nginx_port(node)}/"
    if spec.spark is not None:
        out["spark"] = f"http://127.0.0.1:{spec.spark.metrics_port}/metrics"
    return out


def _nginx_name(node: NodeLayout) -> str:
    return f"nginx-{node.name}"  # testbed.nginx_source names each node's so


def services(spec: PipelineSpec, installed: Installed, config: Config) -> dict[str, Service]:
    """Every testbed process, its config files written (Filebeat's and the probe's are written by the agents).

    Filebeat and the probe are run by the agents: their pid files are their runtimes', so `down` and
    `status` see those processes.
    """
    planned = {s.name: s for s in kafka_services(spec, installed.kafka_libs, config)}
    planned["prometheus"] = prometheus_service(spec, installed.prometheus)
    for node in spec.node_layouts():
        planned[spec.node_process(node, "agent")] = agent.agent_service(spec, node, installed.filebeat, config)
    for node in spec.node_layouts():
        home = filebeat_layout(spec, node).home_dir
        # The argv the agent's process runtime uses by default for a Filebeat component.
        name = spec.node_process(node, "filebeat")
        planned[name] = Service(name, (str(installed.filebeat), "-c", str(home / "filebeat.yml"),
                                       "--path.home", str(home)), spec.resolved_run_dir(),
                                pid_path=filebeat_pid_file(spec, node))
    planned["probe"] = probe_service(spec)
    for node in spec.node_layouts() if spec.nginx is not None else ():
        # its pid file is under its own dir: recorded, so `down` and `status` find it
        service = nginx_service(node, spec.nginx_port(node), log_format=REQUEST_LOG_FORMAT)
        planned[service.name] = replace(service, pid_path=service.pid_file)
    if spec.spark is not None:
        planned["spark"] = spark_service(job_settings(spec), spec.resolved_run_dir())
    return planned


def _state(spec: PipelineSpec) -> dict | None:
    try:
        return json.loads((spec.resolved_run_dir() / "state.json").read_text())
    except (OSError, ValueError):
        return None


def recorded_services(spec: PipelineSpec) -> dict[str, Service]:
    """The services `up` recorded for this run dir (what `down` and `status` act on)."""
    record = _state(spec)
    if record is None:
        return {}
    pid_files = record["pid_files"]
    return {name: Service(name, tuple(argv), spec.resolved_run_dir(),
                          pid_path=Path(pid_files[name]) if name in pid_files else None)
            for name, argv in record["services"].items()}


def recorded_spec(spec: PipelineSpec) -> PipelineSpec:
    """`spec` with the nodes and brokers `up` started in its run dir (as `spec` says when nothing was)."""
    record = _state(spec)
    if record is None:
        return spec
    return spec.sized(record.get("nodes", 1), record.get("brokers", 1))


def up(spec: PipelineSpec, config: Config | None = None) -> list[ServiceStatus]:
    """Install what is missing and start every component; on a failure, stop what this call started."""
    config = config or spec.start_config()
    already = {name for name, service in recorded_services(spec).items() if processes.running_pid(service)}
    if already:
        raise TestbedError(f"the testbed {spec.name!r} already runs ({', '.join(sorted(already))}); "
                           "run `pipetune testbed down` first")
    for field, (host, port) in spec.listeners().items():
        processes.check_port_free(port, field, host)
    installed = install_all()
    run = spec.resolved_run_dir()
    for sub in ("logs", "manifests", "reports"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    for node in spec.node_layouts():
        node.log_path.parent.mkdir(parents=True, exist_ok=True)
    planned = services(spec, installed, config)
    _record(spec, planned)
    brokers = [planned[b.service_name] for b in spec.broker_layouts()]
    agents = {spec.node_process(node, "agent"): node for node in spec.node_layouts()}
    try:
        _start_ready(brokers, lambda _: brokers_ready(spec), 90.0)
        create_topics(spec)  # before any event can flow
        if spec.spark is not None:  # it takes longest to start: under way while the rest starts
            processes.start(planned["spark"])
        _start_ready([planned["prometheus"]], lambda _: _http_ok(prometheus_url(spec) + "/-/ready"), 20.0)
        _start_ready([planned[name] for name in agents], lambda s: _agent_ready(spec, agents[s.name]), 120.0)
        endpoints = _endpoints(spec)
        for node in spec.node_layouts():
            filebeat = planned[spec.node_process(node, "filebeat")]
            processes.wait_ready(filebeat, partial(_http_ok, endpoints[filebeat.name]), 30.0)
        if spec.nginx is not None:  # once Filebeat harvests its log
            _start_ready([planned[_nginx_name(node)] for node in spec.node_layouts()],
                         lambda s: _answers(endpoints[s.name]), 30.0)
        if spec.spark is not None:
            processes.wait_ready(planned["spark"], lambda: spark_ready(job_settings(spec)), spec.spark.ready_timeout_s)
        # Prometheus picks up new targets only after a few seconds: telemetry is live once it has.
        processes.wait_ready(planned["prometheus"], lambda: scraped(spec), 30.0)
    except BaseException:
        down(spec)
        raise
    return status(spec)


def down(spec: PipelineSpec) -> list[str]:
    """Stop what `up` started for this pipeline, in reverse order; returns the names that were running."""
    recorded = recorded_services(spec)
    stopped = []
    for kind in STOP:
        # A kind's processes stop together: a broker stopped after the others lost its quorum waits for the
        # controller to let it shut down, until it is killed.
        group = [name for name in recorded if name.split("-")[0] == kind]
        with ThreadPoolExecutor(max(len(group), 1)) as pool:
            ran = list(pool.map(lambda name: processes.stop(recorded[name]), group))
        stopped += [name for name, was_running in zip(group, ran) if was_running]
    return stopped


def status(spec: PipelineSpec) -> list[ServiceStatus]:
    """Every process `up` recorded (`spec` as `recorded_spec` gives it): pid, endpoint, log."""
    endpoints = _endpoints(spec)
    return [ServiceStatus(name, processes.running_pid(service), endpoints.get(name, ""), _log_file(service))
            for name, service in recorded_services(spec).items()]


def nodes_status(spec: PipelineSpec) -> list[NodeStatus]:
    """Every node of the testbed `up` recorded: its agent's URL and pid, its Filebeat's pid, its log."""
    recorded = recorded_services(spec)

    def pid(name: str) -> int | None:
        return processes.running_pid(recorded[name]) if name in recorded else None
    return [NodeStatus(node.name, node.agent_url, pid(spec.node_process(node, "agent")),
                       pid(spec.node_process(node, "filebeat")), node.log_path) for node in spec.node_layouts()]


def _log_file(service: Service) -> Path:
    # An agent's process runtime logs a component's output beside its pid file (`filebeat.pid.json`).
    if service.pid_path is None:
        return service.log_file
    if service.pid_path.parent.name == "pids":  # a process of the testbed's own kept apart (nginx, in its dir)
        return service.pid_path.parent.parent / "logs" / f"{service.name}.out"
    return service.pid_path.with_name(service.pid_path.name.removesuffix(".pid.json") + ".out")


def running(spec: PipelineSpec) -> bool:
    """Whether every process `up` started for this pipeline still runs."""
    recorded = recorded_services(spec)
    return bool(recorded) and all(processes.running_pid(s) is not None for s in recorded.values())


def apply(spec: PipelineSpec, config: Config) -> str:
    """Put `config` in force on the running testbed through its agents; says what that took ("filebeat
    restarted"). A change not in force, or a testbed not running, is a `TestbedError`."""
    if not running(spec):
        raise TestbedError(f"the testbed {spec.name!r} is not running; start it with `pipetune testbed up`")
    with closing(live_pipeline(recorded_spec(spec))) as pipeline:
        try:
            report = pipeline.apply(config)
        except PipelineUnavailable as err:
            raise TestbedError(f"the testbed {spec.name!r} cannot be changed: {err}") from None
    if not report.ok:
        raise TestbedError(f"the testbed {spec.name!r} did not take the change: {report.message}")
    return report.message


def _record(spec: PipelineSpec, started: dict[str, Service]) -> None:
    (spec.resolved_run_dir() / "state.json").write_text(json.dumps(
        {"pipeline": spec.name, "nodes": spec.nodes, "brokers": spec.brokers, "services": {n: list(s.argv) for n, s in started.items()},
         "pid_files": {n: str(s.pid_path) for n, s in started.items() if s.pid_path}}))
