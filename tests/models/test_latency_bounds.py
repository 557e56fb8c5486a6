"""The latency bounds a config's own waits set: around what the twin measures, whatever the config and load."""

from functools import partial

import numpy as np
import pytest

from models.latency_bounds import lull_ceilings, stage_ceiling_s, stage_floor_s, stage_wait_s
from models.learning import TUNED_BY_TOPOLOGY, WHOLE_PIPELINE, TunedCube
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE
from models.twin import Twin, load, steady_arrivals

# The ceiling counts a stage's waits only; the work on an event comes on top (tens of µs on the twin), which shows
# where the space's order backoff <= max_backoff <= scan_frequency leaves every wait near a millisecond.
WORK_S = 2e-4


@pytest.mark.parametrize("calibration, rate_eps", [("paper-2vcpu", 300.0), ("paper-2vcpu", 840.0),
                                                   ("local-filebeat-kafka", 300.0),
                                                   ("local-filebeat-kafka", 3000.0)])
def test_every_stage_of_a_pipeline_that_keeps_up_lies_within_its_bounds(calibration, rate_eps):
    # Random configs around the defaults (half the tuned values drawn anywhere in their range), as a search meets
    # them; one that falls behind is outside what the ceiling speaks for.
    cal = load(calibration)
    cube = TunedCube(TUNED_BY_TOPOLOGY[cal.topology], Policy())
    defaults = preset("defaults")
    rng = np.random.default_rng(7)
    checked = 0
    for seed in range(10):
        u = np.where(rng.uniform(size=cube.dims) < 0.5, rng.uniform(size=cube.dims), cube.encode(defaults))
        config = cube.decode(u, base=defaults)
        twin = Twin(config, steady_arrivals(rate_eps, 40.0), cal, seed=seed)
        twin.run_until(40.0)
        window = twin.observe(10.0, 40.0)
        if window.throughput_ratio < 0.95:
            continue
        checked += 1

        def value_of(name: str) -> np.ndarray:
            return np.array([float(config[name])])

        for stage, p95_s in window.stage_p95_s.items():
            ceiling_s = stage_ceiling_s(stage, value_of) + WORK_S
            assert stage_floor_s(stage, value_of) <= p95_s <= ceiling_s, (stage, config)
        assert window.p95_s >= stage_floor_s(WHOLE_PIPELINE, value_of)
    assert checked >= 5


def test_a_stage_without_waits_of_its_own_is_unbounded_and_the_whole_pipeline_has_its_slowest_stages_floor():
    values = {"filebeat.backoff": np.array([0.2, 4.0]), "filebeat.max_backoff": np.array([0.1, 10.0]),
              "spark.trigger.interval": np.array([2.0, 0.0])}
    assert stage_floor_s("filebeat->logstash", values.__getitem__) == 0.0
    assert stage_ceiling_s("filebeat->logstash", values.__getitem__) == np.inf
    assert stage_floor_s("kafka->sink", values.__getitem__).tolist() == [1.0, 0.0]
    assert stage_ceiling_s("nginx->filebeat", values.__getitem__).tolist() == [0.2, 10.0]
    assert stage_floor_s(WHOLE_PIPELINE, values.__getitem__).tolist() == [1.0, 2.0]


def test_a_stage_waits_out_its_own_timers_in_seconds_each_only_until_its_batch_fills():
    values = {"filebeat.backoff": np.array([0.2, 4.0]), "spark.trigger.interval": np.array([0.5, 0.0]),
              "filebeat.queue.mem.flush.timeout": np.array([1.0, 1.0]),
              "filebeat.queue.mem.flush.min_events": np.array([2048.0, 100.0]),
              "logstash.pipeline.batch.delay": np.array([50.0, 50.0]),
              "logstash.pipeline.batch.size": np.array([125.0, 3.0]),
              "kafka.consumer.fetch.max.wait.ms": np.array([500.0, 500.0]),
              "kafka.consumer.fetch.min.bytes": np.array([1.0, 80_000.0])}
    wait_s = partial(stage_wait_s, value_of=values.__getitem__, offered_eps=300.0)
    assert wait_s(("filebeat.backoff", "filebeat.max_backoff")).tolist() == [0.2, 4.0]
    assert wait_s(("spark.trigger.interval",)).tolist() == [0.5, 0.0]
    # 2048 events take 6.8 s to come at 300 ev/s: the timer flushes first; 100 events fill the batch in 0.33 s
    assert wait_s(("filebeat.queue.mem.flush.timeout",)) == pytest.approx([1.0, 100 / 300])
    assert wait_s(("logstash.pipeline.batch.delay", "logstash.pipeline.batch.size")) == pytest.approx([0.05, 0.01])
    # one byte is one event's worth; 80 kB is a hundred events of `EVENT_BYTES`
    assert wait_s(("kafka.consumer.fetch.max.wait.ms",)) == pytest.approx([1 / 300, 100 / 300])
    assert wait_s(("filebeat.output.bulk_max_size",)) == 0.0


def test_the_waits_a_lull_sits_out_are_held_at_most_where_the_run_found_them():
    start = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.25, "filebeat.max_backoff": 4.0,
                                   "kafka.consumer.fetch.max.wait.ms": 100.0})
    ceilings = lull_ceilings(start)
    assert ceilings["filebeat.queue.mem.flush.timeout"] == 0.25 and ceilings["filebeat.max_backoff"] == 4.0
    assert ceilings["kafka.consumer.fetch.max.wait.ms"] == 100.0
    assert ceilings["logstash.pipeline.batch.delay"] == 50.0  # the default the file left
    assert ceilings["spark.maxTriggerDelay"] == 900.0  # a skipped batch waits for it where a minimum is set
    # intervals every event waits, at any load, are priced by the windows: no ceiling
    assert not {"filebeat.backoff", "filebeat.scan_frequency", "spark.trigger.interval"} & set(ceilings)
