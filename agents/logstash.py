"""The Logstash 7.17 adapter: logstash.yml (node settings), pipelines.yml (the tuned pipeline.*
settings, reloadable) and the pipeline's config (beats input, kafka output with the tuned producer
settings). Changes are picked up by `config.reload.automatic` or a SIGHUP; health is `:9600/_node/stats`.

Logstash reloads a pipeline when pipelines.yml or its config changes; logstash.yml is read only at
start, so every tuned setting lives in the two reloadable files.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from agents.adapter import Applied, Health, Runtime, ValidationFailed, restart_if_needed, run_check
from models.space import PIPELINE_PARAMS, ChangeCost, Config, Param

PIPELINE_ID = "pipetune"
CONF_FILE = f"conf.d/{PIPELINE_ID}.conf"


@dataclass(frozen=True)
class LogstashLayout:
    """Where this Logstash listens and writes; everything its config needs besides the `Config`."""

    home_dir: Path  # path.settings: logstash.yml and pipelines.yml live here
    beats_port: int
    kafka_hosts: tuple[str, ...]
    topic: str
    api_port: int = 9600


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid double-quoted Logstash string


def render_logstash_yml(layout: LogstashLayout) -> str:
    document = {
        "path.data": str(layout.home_dir / "data"),
        "path.logs": str(layout.home_dir / "logs"),
        "config.reload.automatic": True,
        "config.reload.interval": "3s",
        "api.http.host": "127.0.0.1",
        "api.http.port": layout.api_port,
    }
    return yaml.safe_dump(document, sort_keys=False)


def render_pipelines_yml(layout: LogstashLayout, config: Config) -> str:
    entry = {
        "pipeline.id": PIPELINE_ID,
        "path.config": str(layout.home_dir / CONF_FILE),
        "pipeline.workers": int(config["logstash.pipeline.workers"]),
        "pipeline.batch.size": int(config["logstash.pipeline.batch.size"]),
        # logstash.yml documents pipeline.batch.delay in whole milliseconds.
        "pipeline.batch.delay": round(float(config["logstash.pipeline.batch.delay"])),
    }
    return yaml.safe_dump([entry], sort_keys=False)


def render_pipeline_conf(layout: LogstashLayout, config: Config) -> str:
    out = "logstash.output.kafka."
    return f"""\
input {{
  beats {{
    host => "127.0.0.1"
    port => {layout.beats_port}
  }}
}}
output {{
  kafka {{
    bootstrap_servers => {_quoted(",".join(layout.kafka_hosts))}
    topic_id => {_quoted(layout.topic)}
    codec => json
    linger_ms => {round(float(config[out + "linger_ms"]))}
    batch_size => {int(config[out + "batch_size"])}
    acks => {_quoted(str(config[out + "acks"]))}
    compression_type => {_quoted(str(config[out + "compression_type"]))}
  }}
}}
"""


def check_pipeline_syntax(text: str) -> None:
    """The structural check available without Logstash: braces balance outside strings and comments."""
    depth = 0
    for line_no, line in enumerate(text.splitlines(), 1):
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line).split("#", 1)[0]
        if code.count('"') % 2:
            raise ValidationFailed(f"{CONF_FILE}:{line_no}: unterminated string")
        depth += code.count("{") - code.count("}")
        if depth < 0:
            raise ValidationFailed(f"{CONF_FILE}:{line_no}: unbalanced '}}'")
    if depth:
        raise ValidationFailed(f"{CONF_FILE}: {depth} unclosed '{{'")


class LogstashAdapter:
    """Logstash on this node, reloaded by SIGHUP (the runtime's reload signal) or its own file watch."""

    name = "logstash"
    params: tuple[Param, ...] = tuple(p for p in PIPELINE_PARAMS if p.component == "logstash")

    def __init__(self, layout: LogstashLayout, binary: Path | None = None, *, reload_timeout_s: float = 60.0) -> None:
        self.layout = layout
        self.binary = binary  # bin/logstash, for --config.test_and_exit where Logstash is installed
        self.config_dir = layout.home_dir
        self.reload_timeout_s = reload_timeout_s

    def render(self, config: Config) -> dict[str, str]:
        return {"logstash.yml": render_logstash_yml(self.layout),
                "pipelines.yml": render_pipelines_yml(self.layout, config),
                CONF_FILE: render_pipeline_conf(self.layout, config)}

    def validate(self, staged_dir: Path) -> None:
        """Logstash's own `--config.test_and_exit` when installed, else YAML and brace checks."""
        for name in ("logstash.yml", "pipelines.yml"):
            try:
                yaml.safe_load((staged_dir / name).read_text())
            except yaml.YAMLError as err:
                raise ValidationFailed(f"{name}: {err}") from None
        check_pipeline_syntax((staged_dir / CONF_FILE).read_text())
        if self.binary is not None:
            run_check([str(self.binary), "--path.settings", str(staged_dir), "-f", str(staged_dir / CONF_FILE),
                       "--config.test_and_exit"], "logstash --config.test_and_exit", 300.0)

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """A reload (SIGHUP) for pipeline settings; waits until Logstash counts one more successful reload."""
        restarted = restart_if_needed(runtime, cost, self.name)
        if restarted is not None:
            return restarted
        started = time.monotonic()
        before = self.reloads()
        runtime.reload()  # type: ignore[union-attr]
        deadline = started + self.reload_timeout_s
        while time.monotonic() < deadline:
            now = self.reloads()
            if now[1] > before[1]:
                raise RuntimeError(f"Logstash failed to reload pipeline {PIPELINE_ID!r} (see its log)")
            if now[0] > before[0]:
                return Applied("pipeline reloaded", time.monotonic() - started)
            time.sleep(0.5)
        raise TimeoutError(f"Logstash did not reload pipeline {PIPELINE_ID!r} within {self.reload_timeout_s:g} s")

    def _stats(self) -> dict:
        url = f"http://127.0.0.1:{self.layout.api_port}/_node/stats/pipelines"
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return json.load(response)

    def reloads(self) -> tuple[int, int]:
        """(successes, failures) of the pipeline's reloads as Logstash counts them."""
        reloads = self._stats()["pipelines"][PIPELINE_ID]["reloads"]
        return int(reloads["successes"]), int(reloads["failures"])

    def health(self) -> Health:
        """The node API answers and the pipeline runs, its last reload not a failure."""
        try:
            pipeline = self._stats()["pipelines"].get(PIPELINE_ID)
        except (OSError, ValueError, KeyError) as err:
            return Health(False, f"_node/stats: {err}")
        if pipeline is None:
            return Health(False, f"pipeline {PIPELINE_ID!r} is not running")
        reloads = pipeline["reloads"]
        failed, succeeded = reloads.get("last_failure_timestamp"), reloads.get("last_success_timestamp")
        if failed and (not succeeded or failed > succeeded):
            return Health(False, f"last reload failed: {reloads.get('last_error')}")
        return Health(True, f"pipeline {PIPELINE_ID!r} running")
