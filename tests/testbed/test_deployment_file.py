"""The testbed's deployment file is the deployment schema an operator writes: written, read back, equal."""

from __future__ import annotations

from controller.deployment import is_deployment_file, load_deployment
from testbed.endpoints import deployment, write_deployment
from testbed.pipeline import NAMED_PIPELINES, load_pipeline
from tests.conftest import _write_pipeline


def test_the_testbed_writes_a_deployment_file_that_loads_as_an_operators(tmp_path):
    pipeline_file = _write_pipeline(tmp_path, "dep")
    spec = load_pipeline(pipeline_file)
    (spec.resolved_run_dir() / "agent").mkdir(parents=True)
    (spec.resolved_run_dir() / "agent" / "token").write_text("t\n")  # as `up` writes it
    written = write_deployment(spec, pipeline_file)
    assert written == spec.resolved_run_dir() / "deployment.yaml" and is_deployment_file(written)
    assert not is_deployment_file(pipeline_file)
    loaded = load_deployment(written)
    assert loaded == deployment(spec, pipeline_file)
    assert loaded.testbed == pipeline_file.resolve() and loaded.config == spec.config
    assert [n.name for n in loaded.nodes] == [spec.name] and loaded.kafka.consumer_group == spec.probe.group_id
    assert loaded.latency.stage == "e2e"  # the probe's read from Kafka: no job after it


def test_the_paper_pipelines_deployment_tunes_the_latency_to_the_spark_table():
    """`testbed up --pipeline paper` ends at a Spark job: the daemon reads the `warehouse` stage, not the probe's."""
    paper = deployment(load_pipeline(NAMED_PIPELINES["paper"]))
    assert paper.latency.stage == "warehouse" and paper.latency.source == "event_time"
