"""Prometheus (Debian's binary) run as a plain process that scrapes the probe and every node agent on loopback.

The probe exports latency; the agent exports what is appended to the harvested log and not yet shipped,
and re-exports Filebeat's JSON `/stats` (which Prometheus cannot scrape). The agent's /metrics takes a
bearer token like every other request of it: Prometheus reads the agent's metrics token, which reads
/metrics and nothing else, from its file (`credentials_file`, re-read at each scrape). Each agent has its
own tokens, hence a scrape job of its own; every series of an agent carries `node` (the node's name), as an
operator's scrape config labels each node. Each broker's JMX exporter (testbed/kafka.py) is a target of the job
`kafka-broker`, labelled `broker` with the broker's id, as docs/deploy.md asks of an operator's.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from testbed.agent import metrics_token_file
from testbed.kafka import broker_metrics_port
from testbed.pipeline import NodeLayout, PipelineSpec
from testbed.processes import Service

PROBE_JOB, AGENT_JOB, BROKER_JOB = "pipetune-probe", "pipetune-agent", "kafka-broker"
SPARK_JOB = "pipetune-spark"  # the paper pipeline's Spark sink (testbed/spark_job.py): its `warehouse` stage


def render_prometheus_config(spec: PipelineSpec) -> str:
    interval = f"{int(spec.prometheus.scrape_interval_s * 1000)}ms"
    document = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": PROBE_JOB, "static_configs": [{"targets": [f"127.0.0.1:{spec.probe.metrics_port}"]}]},
            *(_agent_job(spec, node) for node in spec.node_layouts()),
            *_broker_jobs(spec),
            *_spark_jobs(spec),
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


def _broker_jobs(spec: PipelineSpec) -> list[dict[str, object]]:
    """The brokers' JMX exporters as one job, a target each labelled with its broker id (none without them)."""
    targets = [{"targets": [f"{broker.host}:{port}"], "labels": {"broker": str(broker.node_id)}}
               for broker in spec.broker_layouts() if (port := broker_metrics_port(broker)) is not None]
    return [{"job_name": BROKER_JOB, "static_configs": targets}] if targets else []


def _spark_jobs(spec: PipelineSpec) -> list[dict[str, object]]:
    """The Spark sink's latency histograms, a target like the probe's (none without a Spark sink)."""
    if spec.spark is None:
        return []
    return [{"job_name": SPARK_JOB, "static_configs": [{"targets": [f"127.0.0.1:{spec.spark.metrics_port}"]}]}]


def _agent_job(spec: PipelineSpec, node: NodeLayout) -> dict[str, object]:
    """A scrape job for one node's agent, with that agent's metrics token (jobs `pipetune-agent`,
    `pipetune-agent-node-2`)."""
    return {"job_name": spec.node_process(node, AGENT_JOB),
            "authorization": {"type": "Bearer", "credentials_file": str(metrics_token_file(spec, node))},
            "static_configs": [{"targets": [f"{node.host}:{node.agent_port}"], "labels": {"node": node.name}}]}


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


def scraped(spec: PipelineSpec) -> bool:
    """Whether Prometheus has scraped the probe, every agent and the brokers' exporters successfully at least once."""
    query = urllib.parse.urlencode({"query": "up"})
    with urllib.request.urlopen(f"{prometheus_url(spec)}/api/v1/query?{query}", timeout=2.0) as response:
        result = json.load(response)["data"]["result"]
    jobs = {PROBE_JOB} | {spec.node_process(node, AGENT_JOB) for node in spec.node_layouts()}
    jobs |= {job["job_name"] for job in _broker_jobs(spec) + _spark_jobs(spec)}
    return {row["metric"]["job"] for row in result if row["value"][1] == "1"} >= jobs
