"""What a running testbed is to the controller: its node agent and its Prometheus, as a `LivePipeline`."""

from __future__ import annotations

from controller.live import LivePipeline
from controller.telemetry import PrometheusTelemetry
from testbed import agent
from testbed.pipeline import PipelineSpec
from testbed.prometheus import prometheus_url


def live_pipeline(spec: PipelineSpec) -> LivePipeline:
    """The testbed's agent (with the token `up` wrote), its Prometheus, and the pipeline file's starting config
    for the parameters no component here takes. `OSError` when `up` never wrote the token."""
    return LivePipeline([agent.client(spec)], PrometheusTelemetry(prometheus_url(spec)), spec.start_config())
