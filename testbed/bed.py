"""Bring the testbed up, down, and say what runs: Kafka, then Prometheus, the probe, Filebeat.

`up` records what it started in `<run dir>/state.json`; `down` stops exactly those processes (by
pid file, checked against the kernel's start time), in reverse order.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from models.space import PIPELINE_SPACE, ChangeCost, Config
from testbed import processes
from testbed.install import Installed, install_all
from testbed.kafka import alter_broker_threads, broker_ready, create_topics, kafka_service
from testbed.filebeat import filebeat_service, write_filebeat_config
from testbed.pipeline import PipelineSpec
from testbed.probe import probe_service
from testbed.processes import Service, TestbedError
from testbed.prometheus import probe_scraped, prometheus_service, prometheus_url

ORDER = ("kafka", "prometheus", "probe", "filebeat")


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
              "probe": (lambda: _http_ok(endpoints["probe"]), 20.0),
              "filebeat": (lambda: _http_ok(endpoints["filebeat"]), 30.0)}
    ready, timeout_s = checks[service.name]
    processes.start(service)
    processes.wait_ready(service, ready, timeout_s)


def _endpoints(spec: PipelineSpec) -> dict[str, str]:
    return {"kafka": spec.bootstrap, "prometheus": prometheus_url(spec),
            "probe": f"http://127.0.0.1:{spec.probe.metrics_port}/metrics",
            "filebeat": f"http://127.0.0.1:{spec.filebeat.http_port}/stats"}


def services(spec: PipelineSpec, installed: Installed, config: Config) -> dict[str, Service]:
    """Every testbed process, its config files written."""
    return {"kafka": kafka_service(spec, installed.kafka_libs, config),
            "prometheus": prometheus_service(spec, installed.prometheus),
            "probe": probe_service(spec, config),
            "filebeat": filebeat_service(spec, installed.filebeat, config)}


def recorded_services(spec: PipelineSpec) -> dict[str, Service]:
    """The services `up` recorded for this run dir (what `down` and `status` act on)."""
    state = spec.resolved_run_dir() / "state.json"
    try:
        record = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    return {name: Service(name, tuple(argv), spec.resolved_run_dir()) for name, argv in record["services"].items()}


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
    _record(spec, config, planned)
    try:
        for name in ORDER:
            _start_ready(spec, planned[name])
            if name == "kafka":
                create_topics(spec)  # before any event can flow
        # Prometheus picks up new targets only after a few seconds: telemetry is live once it has.
        processes.wait_ready(planned["prometheus"], lambda: probe_scraped(spec), 30.0)
    except BaseException:
        down(spec)
        raise
    return status(spec)


def down(spec: PipelineSpec) -> list[str]:
    """Stop what `up` started for this pipeline, in reverse order; returns the names that were running."""
    recorded = recorded_services(spec)
    stopped = [name for name in reversed(ORDER) if name in recorded and processes.stop(recorded[name])]
    return stopped


def status(spec: PipelineSpec) -> list[ServiceStatus]:
    endpoints = _endpoints(spec)
    return [ServiceStatus(name, processes.running_pid(service), endpoints[name], service.log_file)
            for name, service in recorded_services(spec).items()]


def _changed(old: Config, new: Config, prefix: str) -> bool:
    return any(name.startswith(prefix) for name in new.diff(old))


def apply(spec: PipelineSpec, config: Config) -> list[str]:
    """Move the running testbed to `config` the cheapest way each change allows; says what it did.

    Filebeat input settings reload live (the inputs file is rewritten); any other Filebeat change
    restarts Filebeat; consumer settings restart the probe; broker thread counts change live.
    """
    recorded = recorded_services(spec)
    if not recorded or any(processes.running_pid(s) is None for s in recorded.values()):
        raise TestbedError(f"the testbed {spec.name!r} is not running; start it with `pipetune testbed up`")
    old = recorded_config(spec) or spec.start_config()
    done: list[str] = []
    filebeat_changes = {n for n in config.diff(old) if n.startswith("filebeat.")}
    if filebeat_changes:
        write_filebeat_config(spec, config)
        if all(PIPELINE_SPACE[name].cost is ChangeCost.LIVE for name in filebeat_changes):
            done.append("filebeat inputs reloaded")
        else:
            processes.stop(recorded["filebeat"])
            _start_ready(spec, recorded["filebeat"])
            done.append("filebeat restarted")
    if _changed(old, config, "kafka.consumer."):
        processes.stop(recorded["probe"])
        _start_ready(spec, probe_service(spec, config))
        done.append("probe restarted")
    if _changed(old, config, "kafka.broker."):
        alter_broker_threads(spec.bootstrap, config)
        done.append("broker threads altered")
    _record(spec, config, {**recorded, "probe": probe_service(spec, config)})
    return done


def _record(spec: PipelineSpec, config: Config, started: dict[str, Service]) -> None:
    (spec.resolved_run_dir() / "state.json").write_text(json.dumps(
        {"pipeline": spec.name, "config": dict(config), "services": {n: list(s.argv) for n, s in started.items()}}))


def recorded_config(spec: PipelineSpec) -> Config | None:
    """The config `up` (or the last `apply`) set, completed with defaults for parameters added since."""
    try:
        raw = json.loads((spec.resolved_run_dir() / "state.json").read_text())["config"]
    except (OSError, ValueError, KeyError):
        return None
    return Config({**PIPELINE_SPACE.defaults(), **{k: v for k, v in raw.items() if k in PIPELINE_SPACE}})
