"""The live pipeline: `LivePipeline`, the `Pipeline` seam over node agents and a telemetry source
(Prometheus, which `PrometheusTelemetry` turns into an `Observation`), wherever they run.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, Sequence, TypeVar

import httpx

from agents.client import AgentClient, AgentError
from agents.component import ChangeResult
from agents.probe.events import MERGED, PUBLISH_CONSUME
from controller.agent_changes import by_component, owned_params
from controller.clocks import NodeClocks
from controller.pipelines import ApplyReport, PipelineUnavailable
from controller.telemetry import SINK_SPAN, TelemetrySource
from models.disturbance import clock_disturbance, combined
from models.observation import Observation
from models.space import Config, Value


T = TypeVar("T")

# The probe's stages under the twin's names for the filebeat-kafka topology. Filebeat's publish span holds
# both its queue and its Kafka request, which the probe cannot tell apart: it counts as the "filebeat" stage.
# On a CreateTime topic the probe cannot tell it from the way to the consumer either (no append time): that one
# span counts as the "filebeat" stage too, whose queue flush and batching are the waits it holds; the consumer's
# fetch wait then has no stage of its own, rather than Filebeat's waits counted as the consumer's.
TWIN_STAGES = {"filebeat_read": "nginx->filebeat", "filebeat_publish": "filebeat", "kafka_consume": "kafka->sink",
               PUBLISH_CONSUME: "filebeat"}
# Where the events' way ends in a Spark job's table (latency stage `warehouse`, testbed/spark_job.py), the twin's sink
# stage is the job's span from Kafka's append to the batch committed, which its trigger moves; the probe's consume
# is then a side reader's, off that way, and no stage of the pipeline's. Read as the sink, it hid the job's seconds
# from the learner, which then saw no gain in any Spark setting (bench.live on the paper pipeline: 3 Spark changes).
WAREHOUSE_STAGES = TWIN_STAGES | {"kafka_consume": None, SINK_SPAN: "kafka->sink"}


def _twin_stages(by_stage: dict[str, float], latency_stage: str) -> dict[str, float]:
    """`by_stage` under the twin's names, for a pipeline whose latency is measured to `latency_stage`; a window with
    records of both kinds (the topic's timestamp type changed) counts by the span that covers them all."""
    if PUBLISH_CONSUME in by_stage:
        by_stage = {stage: value for stage, value in by_stage.items() if stage not in PUBLISH_CONSUME.split(MERGED)}
    names = WAREHOUSE_STAGES if latency_stage == "warehouse" else TWIN_STAGES
    renamed = {stage: names.get(stage, stage) for stage in by_stage}
    return {name: by_stage[stage] for stage, name in renamed.items() if name is not None}


class LivePipeline:
    """The `Pipeline` seam over node agents and a telemetry source, wherever they run.

    Each agent (one per node) says which parameters its components take and which values are in force;
    a config change goes to each component that takes a changed parameter, as its next version.
    Parameters no component takes (a Logstash setting where no Logstash runs, the twin's `spark.*`) start
    at `base` and are kept as last applied: nothing acts on them.
    """

    def __init__(self, agents: Sequence[AgentClient], telemetry: TelemetrySource, base: Config,
                 clock_offsets_file: Path | None = None) -> None:
        self.agents = tuple(agents)
        self.telemetry = telemetry
        self._base = base
        self.clocks = NodeClocks({agent.node: agent for agent in self.agents}, clock_offsets_file)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.telemetry.close()

    def apply(self, config: Config) -> ApplyReport:
        """Put `config` in force through the agents; the time restarts took is the pause.

        Stops at the first change an agent does not put in force: `ok=False` naming the component and its
        agent, with the config then in force. An agent that does not answer, or reports a component not
        healthy before the change, is `PipelineUnavailable`.
        """
        done: list[ChangeResult] = []
        for agent in self.agents:
            components = {c["name"]: c for c in _ask(agent, agent.components)}
            _check_healthy(agent, components.values())
            for name, wanted in by_component(config, owned_params(list(components.values()))).items():
                in_force = components[name]
                changes = {p: v for p, v in wanted.items() if in_force["params"].get(p) != v}
                if not changes:
                    continue
                try:
                    version = _ask(agent, partial(agent.next_version, name))
                    result = _ask(agent, partial(agent.put_config, name, version, changes))
                except AgentError as err:
                    return ApplyReport(False, self.current(), 0.0,
                                       f"{name} change refused by the agent at {agent.url}: {err}")
                if not result.ok:
                    return ApplyReport(False, self.current(), 0.0,
                                       f"{name} change {result.status} by the agent at {agent.url}: {result.message}")
                done.append(result)
        self._base = config
        pause_s = sum(r.elapsed_s for r in done if r.action == "restarted")
        said = ", ".join(f"{r.component} {r.action}" for r in done if r.status == "applied")
        return ApplyReport(True, config, pause_s, said or "already in place")

    def current(self) -> Config:
        """The versions the agents have in force, over the last applied values of parameters none of them takes."""
        in_force: dict[str, Value] = {}
        for agent in self.agents:
            for component in _ask(agent, agent.components):
                in_force |= component["params"]
        return Config({**self._base, **in_force})

    def managers(self) -> dict[str, tuple[str, ...]]:
        """Each parameter some component of these agents takes -> who takes it, as "node/component"."""
        return managers(self.agents)

    def node_versions(self) -> dict[str, dict[str, int] | None]:
        """Each node's components and the config version each runs; None for a node whose agent does not answer."""
        versions: dict[str, dict[str, int] | None] = {}
        for agent in self.agents:
            try:
                versions[agent.node] = {c["name"]: int(c["version"]) for c in _ask(agent, agent.components)}
            except (PipelineUnavailable, AgentError):
                versions[agent.node] = None
        return versions

    def observe(self, seconds: float) -> Observation:
        """Wait `seconds`, then summarise that window (the same `Observation` the twin returns, its stages
        named as the twin names them, which is how the learner's per-stage models know them).

        Each node's clock offset is measured as the window starts and written where the probe reads it,
        so the probe corrects that window's event times by it; measured again as it ends, a clock that moved
        in it (or since the last window ended) by more than its P95 bears makes it disturbed."""
        start = time.time()
        self.clocks.measure()
        time.sleep(max(0.0, seconds - (time.time() - start)))
        observation = self.telemetry.window(start, time.time())
        offsets = self.clocks.measure()
        stepped = clock_disturbance(self.clocks.moves(), observation.p95_s, observation.latency_resolution_s)
        stage = self.telemetry.latency_stage
        return replace(observation, stage_p95_s=_twin_stages(observation.stage_p95_s, stage),
                       stage_mean_s=_twin_stages(observation.stage_mean_s, stage), clock_offsets=offsets,
                       disturbance=combined(observation.disturbance, stepped))


def managers(agents: Iterable[AgentClient]) -> dict[str, tuple[str, ...]]:
    """Each parameter a component of `agents` takes (its `params_allowed`) -> each one that takes it, as
    "node/component"; `PipelineUnavailable` when an agent does not answer."""
    taken: dict[str, tuple[str, ...]] = {}
    for agent in agents:
        for name, params in owned_params(_ask(agent, agent.components)).items():
            for param in sorted(params):
                taken[param] = (*taken.get(param, ()), f"{agent.node}/{name}")
    return taken


def _ask(agent: AgentClient, request: Callable[[], T]) -> T:
    """`request`'s answer; an agent that does not answer, whose certificate is not trusted or that refuses
    the token is `PipelineUnavailable` naming its node and URL (the daemon holds until it answers)."""
    try:
        return request()
    except httpx.TransportError as err:
        raise PipelineUnavailable(f"node {agent.node}: agent at {agent.url}: {transport_failure(err)}") from err
    except AgentError as err:
        if err.status in (401, 403):
            raise PipelineUnavailable(f"node {agent.node}: {err}") from err
        raise


def transport_failure(err: BaseException) -> str:
    """What went wrong reaching an agent, in words: an untrusted or expired certificate says so and what to check."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (f"TLS certificate not accepted ({cause.verify_message}): check the node's ca_file and "
                    f"the certificate's validity dates")
        cause = cause.__cause__ or cause.__context__
    return str(err) or type(err).__name__


def _check_healthy(agent: AgentClient, components: Iterable[dict]) -> None:
    """`PipelineUnavailable` naming the agent and each of its components that is not healthy."""
    sick = [f"{c['name']} not healthy ({c['health']['detail']})" for c in components if not c["health"]["ok"]]
    if sick:
        raise PipelineUnavailable(f"node {agent.node}: agent at {agent.url}: {'; '.join(sick)}")
