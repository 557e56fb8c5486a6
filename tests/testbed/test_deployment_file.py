"""The testbed's deployment file is the deployment schema an operator writes: written, read back, equal."""

from __future__ import annotations

from controller.deployment import is_deployment_file, load_deployment
from testbed.endpoints import deployment, write_deployment
from testbed.pipeline import load_pipeline
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
