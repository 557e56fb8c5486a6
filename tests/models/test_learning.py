"""The unit cube every strategy searches, and the policy it honours."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from models.learning import TunedCube, tuned_names
from models.policy import Policy
from models.space import PIPELINE_SPACE, ParamError


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
