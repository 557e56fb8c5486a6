"""The testbed's scrape config: the probe, each agent, and each broker's JMX exporter labelled with its id."""

from __future__ import annotations

import yaml

from testbed.kafka import broker_metrics_port
from testbed.pipeline import load_pipeline
from testbed.prometheus import render_prometheus_config


def test_each_broker_with_an_exporter_is_a_target_labelled_with_its_id(tmp_path, make_pipeline):
    spec = load_pipeline(make_pipeline(tmp_path, "brokers")).sized(1, 3)
    jobs = {job["job_name"] for job in yaml.safe_load(render_prometheus_config(spec))["scrape_configs"]}
    assert "kafka-broker" not in jobs  # no exporter attached (not installed): nothing to scrape
    for broker in spec.broker_layouts():
        broker.home.mkdir(parents=True)
        (broker.home / "metrics.port").write_text(f"{9400 + broker.node_id}\n")  # as kafka_services records it
    jobs = yaml.safe_load(render_prometheus_config(spec))["scrape_configs"]
    (job,) = [j for j in jobs if j["job_name"] == "kafka-broker"]
    assert job["static_configs"] == [{"targets": [f"127.0.2.{j}:{9400 + j}"], "labels": {"broker": str(j)}}
                                     for j in (1, 2, 3)]
    assert [broker_metrics_port(b) for b in spec.broker_layouts()] == [9401, 9402, 9403]


def test_a_spark_sink_is_scraped_as_a_job_of_its_own_and_no_other_pipeline_has_it():
    jobs = {job["job_name"]: job for job in yaml.safe_load(render_prometheus_config(load_pipeline("paper")))
            ["scrape_configs"]}
    assert jobs["pipetune-spark"]["static_configs"] == [{"targets": ["127.0.0.1:19308"]}]
    assert "pipetune-spark" not in {job["job_name"] for job in
                                     yaml.safe_load(render_prometheus_config(load_pipeline()))["scrape_configs"]}
