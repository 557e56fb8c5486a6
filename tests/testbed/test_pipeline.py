"""The pipeline file: the default one loads, and every mistake is reported by field."""

from pathlib import Path

import pytest
import yaml

from testbed.pipeline import DEFAULT_PIPELINE, PipelineError, load_pipeline


def _variant(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load(DEFAULT_PIPELINE.read_text())
    edit(raw)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_default_pipeline_loads_with_loopback_ports_and_component_defaults():
    spec = load_pipeline()
    assert spec.bootstrap.startswith("127.0.0.1:")
    assert spec.filebeat.topic in {t.name for t in spec.kafka.topics}
    assert spec.start_config()["filebeat.queue.mem.flush.timeout"] == 1.0
    assert spec.log_path().is_relative_to(spec.resolved_run_dir())



def test_a_pipeline_beside_another_shares_no_port_and_no_run_dir():
    spec = load_pipeline()
    other = spec.beside("a-bench", 300)
    assert not set(spec.listeners().values()) & set(other.listeners().values())
    assert other.resolved_run_dir() != spec.resolved_run_dir() and other.bootstrap != spec.bootstrap


@pytest.mark.parametrize("edit, field", [
    (lambda r: r["kafka"].update(port="x"), "kafka.port"),
    (lambda r: r["kafka"].update(port=80), "kafka.port"),
    (lambda r: r["filebeat"].update(input="stdin"), "filebeat.input"),
    (lambda r: r["probe"].update(topic="elsewhere"), "probe.topic"),
    (lambda r: r["prometheus"].update(port=r["kafka"]["port"]), "prometheus.port"),
    (lambda r: r["kafka"].update(extra=1), "kafka.extra"),
    (lambda r: r["log"].update(idle_files=-1), "log.idle_files"),
    (lambda r: r.pop("filebeat"), "filebeat"),
    (lambda r: r["config"].update(preset="fastest"), "config"),
    (lambda r: r["config"].update(set={"filebeat.backoff": -1}), "filebeat.backoff"),
    (lambda r: r["config"].update(set={"filebeat.nonsense": 1}), "filebeat.nonsense"),
])
def test_invalid_pipeline_names_the_field(tmp_path, edit, field):
    with pytest.raises(PipelineError) as err:
        load_pipeline(_variant(tmp_path, edit))
    assert field in str(err.value)


def test_missing_or_malformed_file_is_a_pipeline_error(tmp_path):
    with pytest.raises(PipelineError, match="cannot read"):
        load_pipeline(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(PipelineError, match="not valid YAML"):
        load_pipeline(bad)


def test_preset_with_overrides_is_the_starting_config(tmp_path):
    spec = load_pipeline(_variant(tmp_path, lambda r: r["config"].update(
        preset="latency", set={"filebeat.backoff": 0.01})))
    config = spec.start_config()
    assert config["filebeat.output.bulk_max_size"] == 50
    assert config["filebeat.backoff"] == 0.01


def test_the_paper_pipeline_loads_by_name_with_nginx_in_front_and_spark_at_the_end():
    spec = load_pipeline("paper")
    assert spec.name == "paper" and spec.nginx is not None and spec.spark is not None
    assert spec.spark.master == "local[2]" and spec.log.format == "json"
    listeners = spec.listeners()
    assert listeners["nginx.port"] == ("127.0.0.1", spec.nginx.port)
    assert listeners["spark.metrics_port"] == ("127.0.0.1", spec.spark.metrics_port)
    # beside the default testbed: no port in common
    assert not set(listeners.values()) & set(load_pipeline().listeners().values())
    four = spec.sized(4, 1)
    assert len({four.nginx_port(node) for node in four.node_layouts()}) == 4
    assert not set(spec.listeners().values()) & set(spec.beside("paper-bench", 300).listeners().values())


@pytest.mark.parametrize("edit, field", [
    (lambda r: r.update(spark={"metrics_port": 19999, "master": "locl[2]"}), "spark.master"),
    (lambda r: r.update(spark={"metrics_port": 19999, "trigger_interval_s": 0}), "spark.trigger_interval_s"),
    (lambda r: r.update(spark={"metrics_port": r["probe"]["metrics_port"]}), "spark.metrics_port"),
    (lambda r: r.update(nginx={"port": r["agent"]["port"]}), "nginx.port"),
])
def test_a_bad_spark_or_nginx_section_names_the_field(tmp_path, edit, field):
    with pytest.raises(PipelineError, match=field.replace(".", r"\.")):
        load_pipeline(_variant(tmp_path, edit))
