"""Bring the testbed up, down, and say what runs: Kafka, Prometheus, then the node agent, which starts
Filebeat and the probe and makes every Filebeat, broker and consumer change.

`up` records what it started in `<run dir>/state.json`; `down` stops exactly those processes (by
pid file, checked against the kernel's start time), the agent first so it cannot restart Filebeat or
the probe. What is in force is the agent's to say: `apply` goes through the same `LivePipeline` the
daemon drives.
"""

from __future__ import annotations

import json
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from controller.pipelines import PipelineUnavailable
from models.space import Config
from testbed import agent, processes
from testbed.endpoints import live_pipeline
from testbed.filebeat_layout import filebeat_layout, filebeat_pid_file
from testbed.install import Installed, install_all
from testbed.kafka import broker_ready, create_topics, kafka_service
from testbed.pipeline import PipelineSpec
from testbed.probe import probe_service
from testbed.processes import Service, TestbedError
from testbed.prometheus import prometheus_service, prometheus_url, scraped

START = ("kafka", "prometheus", "agent")  # the agent starts Filebeat and the probe
STOP = ("agent", "filebeat", "probe", "prometheus", "kafka")


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    endpoint: str
    log_file: Path


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1.0) as response:
        return response.status == 200


def _start_ready(spec: PipelineSpec, service: Service) -> None:
    """Start a service and wait until it answers (Kafka can take several seconds)."""
    endpoints = _endpoints(spec)
    checks = {"kafka": (lambda: broker_ready(spec.bootstrap), 60.0),
              "prometheus": (lambda: _http_ok(endpoints["prometheus"] + "/-/ready"), 20.0),
              "agent": (lambda: _agent_ready(spec), 90.0)}
    ready, timeout_s = checks[service.name]
    processes.start(service)
    processes.wait_ready(service, ready, timeout_s)


def _agent_ready(spec: PipelineSpec) -> bool:
    """The agent answers once it has started its components (Filebeat and the probe healthy, broker configs set)."""
    with agent.client(spec) as client:
        return all(component["health"]["ok"] for component in client.components())


def _endpoints(spec: PipelineSpec) -> dict[str, str]:
    return {"kafka": spec.bootstrap, "prometheus": prometheus_url(spec),
            "probe": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics",
            "filebeat": f"http://127.0.0.1:{spec.filebeat.http_port}/stats", "agent": agent.agent_url(spec)}


def services(spec: PipelineSpec, installed: Installed, config: Config) -> dict[str, Service]:
    """Every testbed process, its config files written (Filebeat's and the probe's are written by the agent).

    Filebeat and the probe are run by the agent: their pid files are its runtime's, so `down` and
    `status` see those processes.
    """
    home = filebeat_layout(spec).home_dir
    return {"kafka": kafka_service(spec, installed.kafka_libs, config),
            "prometheus": prometheus_service(spec, installed.prometheus),
            "agent": agent.agent_service(spec, installed.filebeat, config),
            # The argv the agent's process runtime uses by default for a Filebeat component.
            "filebeat": Service("filebeat", (str(installed.filebeat), "-c", str(home / "filebeat.yml"),
                                             "--path.home", str(home)), spec.resolved_run_dir(),
                                pid_path=filebeat_pid_file(spec)),
            "probe": probe_service(spec)}


def recorded_services(spec: PipelineSpec) -> dict[str, Service]:
    """The services `up` recorded for this run dir (what `down` and `status` act on)."""
    state = spec.resolved_run_dir() / "state.json"
    try:
        record = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    pid_files = record["pid_files"]
    return {name: Service(name, tuple(argv), spec.resolved_run_dir(),
                          pid_path=Path(pid_files[name]) if name in pid_files else None)
            for name, argv in record["services"].items()}


def up(spec: PipelineSpec, config: Config | None = None) -> list[ServiceStatus]:
    """Install what is missing and start every component; on a failure, stop what this call started."""
    config = config or spec.start_config()
    already = {name for name, service in recorded_services(spec).items() if processes.running_pid(service)}
    if already:
        raise TestbedError(f"the testbed {spec.name!r} already runs ({', '.join(sorted(already))}); "
                           "run `pipetune testbed down` first")
    for field, port in spec.ports().items():
        processes.check_port_free(port, field)
    installed = install_all()
    run = spec.resolved_run_dir()
    for sub in ("logs", "manifests", "reports"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    spec.log_path().parent.mkdir(parents=True, exist_ok=True)
    planned = services(spec, installed, config)
    _record(spec, planned)
    try:
        for name in START:
            _start_ready(spec, planned[name])
            if name == "kafka":
                create_topics(spec)  # before any event can flow
        processes.wait_ready(planned["filebeat"], lambda: _http_ok(_endpoints(spec)["filebeat"]), 30.0)
        # Prometheus picks up new targets only after a few seconds: telemetry is live once it has.
        processes.wait_ready(planned["prometheus"], lambda: scraped(spec), 30.0)
    except BaseException:
        down(spec)
        raise
    return status(spec)


def down(spec: PipelineSpec) -> list[str]:
    """Stop what `up` started for this pipeline, in reverse order; returns the names that were running."""
    recorded = recorded_services(spec)
    stopped = [name for name in STOP if name in recorded and processes.stop(recorded[name])]
    return stopped


def status(spec: PipelineSpec) -> list[ServiceStatus]:
    endpoints = _endpoints(spec)
    return [ServiceStatus(name, processes.running_pid(service), endpoints[name], _log_file(service))
            for name, service in recorded_services(spec).items()]


def _log_file(service: Service) -> Path:
    # The agent's process runtime logs a component's output beside its pid file.
    return service.pid_path.with_name(f"{service.name}.out") if service.pid_path else service.log_file


def running(spec: PipelineSpec) -> bool:
    """Whether every process `up` started for this pipeline still runs."""
    recorded = recorded_services(spec)
    return bool(recorded) and all(processes.running_pid(s) is not None for s in recorded.values())


def apply(spec: PipelineSpec, config: Config) -> str:
    """Put `config` in force on the running testbed through its agent; says what that took ("filebeat
    restarted"). A change not in force, or a testbed not running, is a `TestbedError`."""
    if not running(spec):
        raise TestbedError(f"the testbed {spec.name!r} is not running; start it with `pipetune testbed up`")
    with closing(live_pipeline(spec)) as pipeline:
        try:
            report = pipeline.apply(config)
        except PipelineUnavailable as err:
            raise TestbedError(f"the testbed {spec.name!r} cannot be changed: {err}") from None
    if not report.ok:
        raise TestbedError(f"the testbed {spec.name!r} did not take the change: {report.message}")
    return report.message


def _record(spec: PipelineSpec, started: dict[str, Service]) -> None:
    (spec.resolved_run_dir() / "state.json").write_text(json.dumps(
        {"pipeline": spec.name, "services": {n: list(s.argv) for n, s in started.items()},
         "pid_files": {n: str(s.pid_path) for n, s in started.items() if s.pid_path}}))
