"""The unit cube every strategy searches, and the policy it honours."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.space import PIPELINE_SPACE, ChangeCost, ParamError


def test_encode_decode_round_trips_and_warps_wide_ranges():
    cube = TunedCube(tuned_names(Policy(), "paper"), Policy())
    defaults = PIPELINE_SPACE.defaults()
    back = cube.decode(cube.encode(defaults), base=defaults)
    for name in cube.names:
        assert float(back[name]) == pytest.approx(float(defaults[name]), rel=1e-3, abs=1e-6)
    # flush.timeout spans 0..60 s: 10 ms and 100 ms sit as far apart as 1 s and 10 s (log warp, 0 reachable)
    i = cube.names.index("filebeat.queue.mem.flush.timeout")
    at = lambda v: cube.encode(PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": v}))[i]
    assert at(0.1) - at(0.01) == pytest.approx(at(10.0) - at(1.0), rel=0.1)
    assert at(0.0) == 0.0


def test_policy_bounds_shrink_the_box_and_pins_leave_it():
    policy = Policy(bounds={"filebeat.backoff": (0.01, 0.1)}, pins={"logstash.pipeline.batch.size": 64})
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    assert "logstash.pipeline.batch.size" not in cube.names
    corner = cube.decode([0.0] * cube.dims, base=PIPELINE_SPACE.defaults())
    assert corner["filebeat.backoff"] == pytest.approx(0.01)
    assert corner["logstash.pipeline.batch.size"] == 64
    top = cube.decode([1.0] * cube.dims, base=PIPELINE_SPACE.defaults())
    assert top["filebeat.backoff"] == pytest.approx(0.1)


@pytest.mark.parametrize("policy, field", [
    (Policy(bounds={"filebeat.backoff": (0.0, 1.0)}), "bounds.filebeat.backoff"),  # below the hard limit 0.001
    (Policy(bounds={"filebeat.backoff": (2.0, 1.0)}), "bounds.filebeat.backoff"),
    (Policy(pins={"filebeat.output.bulk_max_size": 0}), "pins.filebeat.output.bulk_max_size"),
    (Policy(pins={"nope": 1}), "nope"),
    (Policy(bounds={"filebeat.backoff": (0.1, 0.5)}, pins={"filebeat.backoff": 1.0}), "pins.filebeat.backoff"),
])
def test_policy_check_names_the_field_and_the_allowed_range(policy, field):
    with pytest.raises(ParamError) as err:
        policy.check()
    assert err.value.name == field
    assert err.value.allowed


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=11, max_size=11),
       st.floats(0.001, 5.0), st.floats(0.001, 5.0), st.integers(1, 500))
def test_decoded_configs_always_honour_bounds_and_pins(u, a, b, pin):
    low, high = sorted((a, b))
    policy = Policy(bounds={"filebeat.max_backoff": (low, high)}, pins={"logstash.pipeline.batch.size": pin})
    cube = TunedCube(tuned_names(Policy(), "paper"), policy)
    config = cube.decode(u[: cube.dims], base=PIPELINE_SPACE.defaults())
    assert policy.enforce(config) == config
    assert all(math.isfinite(float(config[n])) for n in cube.names)


def test_the_box_never_decodes_a_queue_filebeat_refuses():
    policy = Policy(tuned=["filebeat.queue.mem.flush.min_events", "filebeat.queue.mem.events"])
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    i, j = cube.names.index("filebeat.queue.mem.flush.min_events"), cube.names.index("filebeat.queue.mem.events")
    u = [0.5] * cube.dims
    u[i], u[j] = 1.0, 0.0  # the largest flush batch in the smallest queue
    config = cube.decode(u, base=PIPELINE_SPACE.defaults())
    assert config["filebeat.queue.mem.flush.min_events"] <= config["filebeat.queue.mem.events"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=4, max_size=4))
def test_decoded_values_are_on_the_resolution_each_component_accepts(u):
    # logstash.yml takes whole milliseconds of batch delay; the Java producer's linger.ms and the consumer's
    # fetch.max.wait.ms are ints; librdkafka's linger.ms is a double, so fractions stay.
    whole_ms = ("logstash.pipeline.batch.delay", "logstash.output.kafka.linger_ms", "kafka.consumer.fetch.max.wait.ms")
    policy = Policy(tuned=[*whole_ms, "kafka.producer.linger.ms"], bounds={"logstash.pipeline.batch.delay": (0.5, 7.5)})
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    config = cube.decode(u, base=PIPELINE_SPACE.defaults())
    assert all(float(config[n]).is_integer() for n in whole_ms), dict(config)
    assert 1.0 <= config["logstash.pipeline.batch.delay"] <= 7.0  # whole ms within the bounds
    fractional = cube.decode([0.5] * cube.dims, base=PIPELINE_SPACE.defaults())["kafka.producer.linger.ms"]
    assert not float(fractional).is_integer()


def test_values_read_a_parameter_at_many_points_of_the_cube_as_decoding_each_would():
    policy = Policy(pins={"filebeat.max_backoff": 0.002})
    cube = TunedCube(tuned_names(policy, "paper"), policy)
    base = policy.enforce(PIPELINE_SPACE.defaults())
    rows = np.random.default_rng(0).uniform(size=(5, cube.dims))
    for name in ("filebeat.backoff", "spark.trigger.interval", "filebeat.queue.mem.flush.timeout"):
        decoded = [float(cube.decode(u, base=base)[name]) for u in rows]
        assert cube.values(rows, name, base=base) == pytest.approx(decoded, rel=0.01, abs=0.001), name
    assert cube.values(rows, "filebeat.max_backoff", base=base).tolist() == [0.002] * 5  # pinned: the base's


def test_a_change_costs_what_its_dearest_parameter_costs():
    assert ChangeCost.dearest([ChangeCost.LIVE, ChangeCost.RESTART, ChangeCost.RELOAD]) is ChangeCost.RESTART
    assert ChangeCost.dearest([ChangeCost.RELOAD, ChangeCost.LIVE]) is ChangeCost.RELOAD
    assert ChangeCost.dearest([]) is ChangeCost.LIVE
    policy = Policy(tuned=["kafka.broker.num.io.threads", "logstash.pipeline.batch.size", "filebeat.backoff"])
    assert TunedCube(tuned_names(policy, "paper"), policy).restart_mask().tolist() == [False, False, True]
