"""The live pipeline on the testbed as the daemon's `Pipeline`: reconfigure it through its agent, observe
windows of its telemetry (Prometheus, which `PrometheusTelemetry` turns into an `Observation`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import httpx

from controller.pipelines import ApplyReport, PipelineUnavailable
from controller.telemetry import PrometheusTelemetry, TelemetrySource
from models.observation import Observation
from models.space import Config
from testbed import agent, bed
from testbed.pipeline import PipelineSpec
from testbed.processes import TestbedError, running_pid
from testbed.prometheus import prometheus_url


# The probe's stages under the twin's names for the filebeat-kafka topology. Filebeat's publish span holds
# both its queue and its Kafka request, which the probe cannot tell apart: it counts as the "filebeat" stage.
TWIN_STAGES = {"filebeat_read": "nginx->filebeat", "filebeat_publish": "filebeat", "kafka_consume": "kafka->sink"}


def _twin_stages(by_stage: dict[str, float]) -> dict[str, float]:
    return {TWIN_STAGES.get(stage, stage): value for stage, value in by_stage.items()}


class LivePipeline:
    """The `Pipeline` seam over the running testbed: reconfigure it, observe windows of telemetry."""

    def __init__(self, spec: PipelineSpec, telemetry: TelemetrySource | None = None) -> None:
        self.spec = spec
        self.telemetry = telemetry or PrometheusTelemetry(prometheus_url(spec))

    def apply(self, config: Config) -> ApplyReport:
        """Reconfigure the running testbed through its agent; a restart's time in force is the pause."""
        try:
            results = bed.apply_changes(self.spec, config)
        except TestbedError as err:
            # apply_changes says the same for a part that is down and a change the agent refused.
            self._check_reachable()
            return ApplyReport(False, self._recorded(), 0.0, str(err))
        refused = [r for r in results if r.status not in bed.OK]
        if refused:
            # apply_changes recorded what the agent kept in force; the agent may be the thing that failed.
            r = refused[0]
            return ApplyReport(False, self._recorded(), 0.0, f"{r.component} change {r.status}: {r.message}")
        pause_s = sum(r.elapsed_s for r in results if r.action == "restarted")
        return ApplyReport(True, config, pause_s, ", ".join(bed.describe(results)) or "already in place")

    def current(self) -> Config:
        """The agent's versions in force, with the testbed's record for parameters no component on it reads."""
        try:
            in_force = agent.params_in_force(self.spec)
        except httpx.TransportError as err:
            raise PipelineUnavailable(f"agent at {agent.agent_url(self.spec)}: {err}") from err
        return Config({**self._recorded(), **in_force})

    def _check_reachable(self) -> None:
        """`PipelineUnavailable` naming what is down: a testbed process, or an agent that does not answer."""
        down = [name for name, service in bed.recorded_services(self.spec).items() if running_pid(service) is None]
        if down:
            raise PipelineUnavailable(f"testbed {self.spec.name!r}: {', '.join(down)} not running")
        self.current()

    def _recorded(self) -> Config:
        return bed.recorded_config(self.spec) or self.spec.start_config()

    def observe(self, seconds: float) -> Observation:
        """Wait `seconds`, then summarise that window (the same `Observation` the twin returns, its stages
        named as the twin names them, which is how the learner's per-stage models know them)."""
        start = time.time()
        time.sleep(seconds)
        observation = self.telemetry.window(start, time.time())
        return replace(observation, stage_p95_s=_twin_stages(observation.stage_p95_s),
                       stage_mean_s=_twin_stages(observation.stage_mean_s))
