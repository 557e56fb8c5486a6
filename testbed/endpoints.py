"""What a running testbed is to the controller: a deployment (its node agents, its Kafka and consumer group,
its Prometheus), written to `<run_dir>/deployment.yaml` by `up` and read as an operator's would be. It
has no `pools:`: every node is then one pool."""

from __future__ import annotations

from pathlib import Path

from controller import deployment as deployment_file
from controller.deployment import Deployment, KafkaSpec, LatencySpec, NodeSpec, PrometheusSpec
from controller.live import LivePipeline
from testbed import agent
from testbed.pipeline import PipelineSpec
from testbed.probe import clock_offsets_file
from testbed.prometheus import prometheus_url


def deployment_path(spec: PipelineSpec) -> Path:
    return spec.resolved_run_dir() / "deployment.yaml"


def deployment(spec: PipelineSpec, pipeline_file: Path | None = None) -> Deployment:
    """The testbed as a deployment: its nodes (each agent on its loopback address, plain HTTP), the probe's
    group, its Prometheus; the latency to the table when a Spark job ends the pipeline."""
    nodes = [NodeSpec(name=node.name, agent_url=node.agent_url, token_file=agent.token_file(spec, node))
             for node in spec.node_layouts()]
    return Deployment(name=spec.name, nodes=nodes,
                      kafka=KafkaSpec(bootstrap=spec.bootstrap, consumer_group=spec.probe.group_id),
                      prometheus=PrometheusSpec(url=prometheus_url(spec)), config=spec.config,
                      # with a Spark job at the end, the latency tuned is to its table (the paper's pipeline)
                      latency=LatencySpec(clock_offsets_file=clock_offsets_file(spec),
                                          stage="warehouse" if spec.spark else "e2e"),
                      testbed=pipeline_file.resolve() if pipeline_file else None)


def write_deployment(spec: PipelineSpec, pipeline_file: Path | None = None) -> Path:
    """Write the testbed's deployment file; `pipetune autotune --pipeline` takes it as it takes an operator's."""
    return deployment_file.write_deployment(deployment(spec, pipeline_file), deployment_path(spec))


def live_pipeline(spec: PipelineSpec) -> LivePipeline:
    """The testbed's `LivePipeline`, built from its deployment exactly as an operator's is. `OSError` when
    `up` never wrote the token."""
    return deployment_file.live_pipeline(deployment(spec))
