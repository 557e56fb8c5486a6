"""Prometheus (Debian's binary) run as a plain process that scrapes the probe on loopback.

Filebeat's own HTTP endpoint serves JSON (`/stats`), which Prometheus cannot scrape; the probe
process re-exports it (`pipetune_filebeat_*`, agents/filebeat_exporter.py), so one scrape job covers both.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from testbed.pipeline import PipelineSpec
from testbed.processes import Service


def render_prometheus_config(spec: PipelineSpec) -> str:
    interval = f"{int(spec.prometheus.scrape_interval_s * 1000)}ms"
    document = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": "pipetune-probe", "static_configs": [{"targets": [f"127.0.0.1:{spec.probe.metrics_port}"]}]},
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


def prometheus_service(spec: PipelineSpec, binary: Path) -> Service:
    home = spec.resolved_run_dir() / "prometheus"
    home.mkdir(parents=True, exist_ok=True)
    config = home / "prometheus.yml"
    config.write_text(render_prometheus_config(spec))
    argv = (str(binary), f"--config.file={config}", f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{spec.prometheus.port}", "--storage.tsdb.retention.time=2d",
            "--web.enable-lifecycle")
    return Service("prometheus", argv, spec.resolved_run_dir())


def prometheus_url(spec: PipelineSpec) -> str:
    return f"http://127.0.0.1:{spec.prometheus.port}"


def probe_scraped(spec: PipelineSpec) -> bool:
    """Whether Prometheus has scraped the probe successfully at least once."""
    query = urllib.parse.urlencode({"query": 'up{job="pipetune-probe"}'})
    with urllib.request.urlopen(f"{prometheus_url(spec)}/api/v1/query?{query}", timeout=2.0) as response:
        result = json.load(response)["data"]["result"]
    return any(row["value"][1] == "1" for row in result)
