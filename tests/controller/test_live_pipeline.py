"""The controller's `LivePipeline` over a real node agent at an address of its own: no testbed, none of its
files. The agent (served on loopback in this process) manages one Kafka producer component; the producer
process is a stand-in (`sleep`: no broker runs here), and so is the telemetry (`FixedTelemetry`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from controller.live import LivePipeline
from controller.pipelines import PipelineUnavailable
from models.clock_offset import offsets_from_document
from models.observation import Observation
from models.space import PIPELINE_SPACE
from tests.agents.conftest import TOKEN, ServedAgent, write_wrapper
from tests.conftest import FixedTelemetry, free_ports


@pytest.fixture
def producer_agent(tmp_path: Path) -> Iterator[ServedAgent]:
    """An agent whose one component, `replay`, is a producer process it runs (a stand-in that only sleeps)."""
    config_dir = tmp_path / "replay"
    wrapper = write_wrapper(config_dir)  # a `crash-next` marker beside it makes the next start fail
    (config_dir / "producer.properties").write_text("")
    (port,) = free_ports(1)
    config = AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": port, "health_timeout_s": 5, "settle_s": 0.5,
        "supervise_interval_s": 600,  # a process a test stops stays stopped
        "components": [{"name": "replay", "kind": "kafka-producer",
                        "properties": str(config_dir / "producer.properties"),
                        "params": {"kafka.producer.linger.ms": 2},
                        "runtime": {"argv": ["/bin/sh", str(wrapper), "sleep", "600"]}}]})
    agent = ServedAgent(config)
    try:
        yield agent
    finally:
        agent.close()


def _pipeline(url: str) -> LivePipeline:
    return LivePipeline([AgentClient(url, TOKEN, timeout_s=30)], FixedTelemetry(), PIPELINE_SPACE.defaults())


def test_a_change_goes_to_the_component_that_takes_it_and_is_read_back(producer_agent, tmp_path):
    pipeline = _pipeline(producer_agent.url)
    before = pipeline.current()
    assert before["kafka.producer.linger.ms"] == 2  # the agent's version in force, over the base
    runtime = producer_agent.components["replay"].runtime
    pid = runtime.pid()
    # filebeat.backoff: no component of this agent takes it; it is kept as applied, nothing acts on it.
    changed = PIPELINE_SPACE.config({"kafka.producer.linger.ms": 5, "filebeat.backoff": 0.01}, base=before)
    report = pipeline.apply(changed)
    assert report.ok and report.message == "replay restarted" and report.pause_s > 0
    assert pipeline.current() == changed == report.config
    assert runtime.pid() not in (None, pid)
    assert "linger.ms=5\n" in (tmp_path / "replay" / "producer.properties").read_text()
    started = [e for e in producer_agent.client.audit("replay") if e["event"] == "change_started"]
    assert [e["changes"] for e in started] == [{"kafka.producer.linger.ms": 5}]
    assert pipeline.apply(changed).message == "already in place"
    observation = pipeline.observe(0.1)
    assert set(observation.stage_p95_s) == {"nginx->filebeat", "filebeat", "kafka->sink"}  # as the twin names them


def test_a_change_the_component_fails_is_a_refusal_naming_it(producer_agent, tmp_path):
    pipeline = _pipeline(producer_agent.url)
    before = pipeline.current()
    (tmp_path / "replay" / "crash-next").touch()  # the producer restarted for the change exits at once
    report = pipeline.apply(PIPELINE_SPACE.config({"kafka.producer.linger.ms": 7}, base=before))
    assert not report.ok
    assert report.message.startswith(f"replay change rolled_back by the agent at {producer_agent.url}: ")
    assert report.config == before == pipeline.current()


def test_a_component_not_healthy_makes_the_pipeline_unavailable_naming_agent_and_component(producer_agent):
    pipeline = _pipeline(producer_agent.url)
    producer_agent.components["replay"].runtime.stop()
    with pytest.raises(PipelineUnavailable, match=f"agent at {producer_agent.url}: replay not healthy"):
        pipeline.apply(PIPELINE_SPACE.config({"kafka.producer.linger.ms": 9}, base=pipeline.current()))


def test_an_agent_that_does_not_answer_is_unavailable_naming_its_url():
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    pipeline = _pipeline(url)
    with pytest.raises(PipelineUnavailable, match=f"agent at {url}: "):
        pipeline.current()
    with pytest.raises(PipelineUnavailable, match=f"agent at {url}: "):
        pipeline.apply(PIPELINE_SPACE.defaults())


def test_each_window_measures_the_nodes_clock_and_writes_it_where_the_probe_reads_it(producer_agent, tmp_path):
    offsets_file = tmp_path / "probe" / "clock-offsets.json"
    pipeline = LivePipeline([AgentClient(producer_agent.url, TOKEN, timeout_s=30, node="n1")], FixedTelemetry(),
                            PIPELINE_SPACE.defaults(), offsets_file)
    observation = pipeline.observe(0.2)
    # the agent runs in this process, on this clock: its offset is within the round trip of zero
    offset = observation.clock_offsets["n1"]
    assert abs(offset.offset_s) <= offset.error_s + 1e-3
    assert offsets_from_document(json.loads(offsets_file.read_text())) == {"n1": offset}


class CreateTimeTelemetry(FixedTelemetry):
    """The probe's figures on a CreateTime topic: Filebeat's publish and the consume are one span."""

    def window(self, start: float, end: float) -> Observation:
        stages = {"filebeat_read": 0.01, "filebeat_publish+kafka_consume": 0.07}
        return replace(super().window(start, end), stage_p95_s=stages, stage_mean_s=stages)


def test_on_a_create_time_topic_the_span_after_filebeats_read_counts_as_filebeats_stage_never_the_consumers():
    """Issue 39: Filebeat's 67 ms flush wait, counted in the consumer's stage, sent the learner to search
    kafka.consumer.fetch.max.wait.ms while the flush timeout was the P95."""
    observation = LivePipeline([], CreateTimeTelemetry(), PIPELINE_SPACE.defaults()).observe(0.01)
    assert observation.stage_p95_s == {"nginx->filebeat": 0.01, "filebeat": 0.07}


class WarehouseTelemetry(FixedTelemetry):
    """Prometheus' figures on the paper pipeline: the probe's hops beside the Spark job's (testbed/spark_job.py), the
    latency measured to the table."""

    latency_stage = "warehouse"

    def window(self, start: float, end: float) -> Observation:
        stages = {"filebeat_read": 0.5, "filebeat_publish": 0.1, "kafka_consume": 0.05, "spark_batch_start": 1.5,
                  "warehouse_commit": 2.0, "kafka_commit": 3.2}
        return replace(super().window(start, end), stage_p95_s=stages, stage_mean_s=stages)


def test_where_the_way_ends_in_a_spark_table_its_kafka_to_commit_span_is_the_sink_stage_not_the_probes_read():
    """Issue 40: the probe's 50 ms read of the topic counted as the sink, the job's seconds in no stage the learner
    models: it saw no gain in any Spark setting and moved the job 3 times in a tuning run."""
    observation = LivePipeline([], WarehouseTelemetry(), PIPELINE_SPACE.defaults()).observe(0.01)
    assert observation.stage_p95_s["kafka->sink"] == 3.2
    assert {"nginx->filebeat", "filebeat", "kafka->sink"} <= set(observation.stage_p95_s)
    assert "kafka_consume" not in observation.stage_p95_s
    # the probe's pipeline keeps its consumer as the sink
    assert LivePipeline([], FixedTelemetry(), PIPELINE_SPACE.defaults()).observe(0.01).stage_p95_s["kafka->sink"] == 0.03
