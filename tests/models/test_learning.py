"""The unit cube every strategy searches, and the policy it honours."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.presets import preset
from models.space import PIPELINE_SPACE, ChangeCost, ParamError, RuleError, check_rules


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


_BACKOFFS = ("filebeat.backoff", "filebeat.max_backoff", "filebeat.scan_frequency")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=3, max_size=3), st.sampled_from([{}, *[
    {"pins": {name: value}} for name in _BACKOFFS for value in (0.005, 0.5, 9.0)], {"bounds": {
        "filebeat.backoff": (0.5, 2.0)}}, {"bounds": {"filebeat.scan_frequency": (0.01, 0.1)}}]))
def test_the_box_never_decodes_backoffs_out_of_filebeats_order(u, steer):
    """Issue 39: the final config's backoff.max (55.8 s) was above check_interval, which Filebeat's reference forbids
    (backoff <= max_backoff <= scan_frequency); a pin or a bound moves the others, within their own bounds."""
    policy = Policy(tuned=list(_BACKOFFS), **steer)
    policy.check()
    cube, base = TunedCube(tuned_names(policy, "paper"), policy), policy.enforce(PIPELINE_SPACE.defaults())
    config = cube.decode(u[: cube.dims], base=base)
    check_rules(config)
    assert policy.enforce(config) == config
    rows = np.array([u[: cube.dims]])  # what the learner's models read there: the values it proposes
    assert [cube.values(rows, n, base=base)[0] for n in _BACKOFFS] == pytest.approx(
        [float(config[n]) for n in _BACKOFFS], rel=0.01)
    # ... and the coordinates its models score a candidate at: where the proposed config lies, or a corner out of
    # order stays unmeasured and uncertain for ever (fb-kafka diurnal made 37 changes in 60 windows against 11)
    assert cube.kept_in_order(rows, base)[0] == pytest.approx(cube.encode(config), abs=0.01)


def test_a_pin_moves_the_values_a_rule_ties_to_it_and_leaves_a_config_that_broke_none_alone():
    assert policy_enforced({"filebeat.scan_frequency": 0.5}) == (0.5, 0.5, 0.5)
    assert policy_enforced({"filebeat.max_backoff": 30.0}) == (1.0, 30.0, 30.0)
    assert policy_enforced({"filebeat.backoff": 0.1}) == (0.1, 10.0, 10.0)
    # the paper's Hybrid (scan_frequency 0.01 s with the default backoffs) is no pin's doing: left as the study ran it
    assert Policy(pins={"filebeat.output.worker": 2}).enforce(preset("hybrid"))["filebeat.max_backoff"] == 10.0


def policy_enforced(pins: dict) -> tuple[float, ...]:
    config = Policy(pins=pins).enforce(PIPELINE_SPACE.defaults())
    return tuple(float(config[n]) for n in _BACKOFFS)


@pytest.mark.parametrize("policy, low, high", [
    (Policy(pins={"filebeat.max_backoff": 30.0}, bounds={"filebeat.scan_frequency": (0.1, 20.0)}),
     "pins.filebeat.max_backoff", "bounds.filebeat.scan_frequency"),
    (Policy(pins={"filebeat.backoff": 5.0, "filebeat.scan_frequency": 1.0}),  # through max_backoff, between them
     "pins.filebeat.backoff", "pins.filebeat.scan_frequency"),
    (Policy(bounds={"filebeat.queue.mem.flush.min_events": (8192, 16384), "filebeat.queue.mem.events": (64, 4096)}),
     "bounds.filebeat.queue.mem.flush.min_events", "bounds.filebeat.queue.mem.events"),
])
def test_policy_check_names_both_fields_that_leave_a_components_rule_no_values(policy, low, high):
    with pytest.raises(RuleError) as err:
        policy.check()
    assert (err.value.name, err.value.other) == (low, high)


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
    dims = TunedCube(tuned_names(policy, "paper"), policy).restart_dims()
    assert {c: d.tolist() for c, d in dims.items()} == {"filebeat": [False, False, True]}


def test_a_ceiling_lowers_what_a_dimension_may_decode_to_without_rescaling_it():
    names = ("filebeat.queue.mem.flush.timeout", "filebeat.backoff", "filebeat.max_backoff")
    free = TunedCube(names, Policy())
    capped = TunedCube(names, Policy(), ceilings={"filebeat.queue.mem.flush.timeout": 1.0, "filebeat.max_backoff": 0.1})
    base = PIPELINE_SPACE.defaults()
    below = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.4, "filebeat.backoff": 0.01,
                                   "filebeat.max_backoff": 0.05}, base=base)
    assert np.allclose(capped.encode(below), free.encode(below))  # the same scale where the ceiling does not bind
    u = np.array([[0.9, 0.95, 0.99], [0.001, 0.1, 0.2], capped.encode(below)])
    assert capped.under_ceilings(u).tolist() == [False, True, True] and free.under_ceilings(u).all()
    decoded = capped.decode(u[0], base=base)  # decoding never goes above a ceiling either
    assert decoded["filebeat.queue.mem.flush.timeout"] == 1.0 and decoded["filebeat.max_backoff"] == 0.1
    assert decoded["filebeat.backoff"] <= 0.1  # kept in order under the ceiling of the one it may not exceed
    assert capped.decode(u[1], base=base) == free.decode(u[1], base=base)
    # a new policy keeps the ceilings
    assert capped.with_policy(Policy(bounds={"filebeat.backoff": (0.001, 1.0)})).under_ceilings(u).tolist() == \
        [False, True, True]
