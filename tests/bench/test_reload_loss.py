"""bench.reload_loss: its own testbed, whose probe counts an event lost only once the restarts' backlog had time
to ship."""

from bench.reload_loss import DRAIN_S, PORT_SHIFT, busy_config, reload_spec
from testbed.pipeline import DEFAULT_PIPELINE, load_pipeline


def test_the_bench_runs_beside_the_default_pipeline_and_counts_an_event_lost_only_after_the_drain():
    default, spec = load_pipeline(DEFAULT_PIPELINE), reload_spec()
    assert spec.name == "reload-loss" and spec.kafka.port == default.kafka.port + PORT_SHIFT
    # at the default grace (10 s) half a run's events read lost that were still in the log behind the restarts
    assert spec.probe.late_after_s == DRAIN_S > default.probe.late_after_s


def test_the_busy_config_has_the_small_queue_that_makes_the_harvester_wait():
    config = busy_config(32, 4)
    assert config["filebeat.queue.mem.events"] == 32 and config["filebeat.output.bulk_max_size"] == 4
