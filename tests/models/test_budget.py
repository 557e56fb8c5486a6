"""The CPU budget: limits that follow the config before tuning, per event, with the policy's allowances, and the
allowance a reading's noise earns."""

import math

import pytest
from pydantic import ValidationError

from models.budget import (NOISE_PRIOR_SD, REQUESTS, BudgetLimits, CostNoise, CostReference, CpuBudget, RequestBudget,
                           budgeted, budgeted_costs, within_limits)
from models.observation import Observation
from models.policy import Policy

REFERENCE = CostReference(offered_eps=300.0, costs={"filebeat": 0.06, "logstash": 0.3})


def test_a_component_may_use_the_starting_configs_cpu_per_event_a_share_more_and_some_cores_besides():
    limits = BudgetLimits(CpuBudget(), None, REFERENCE).at(300.0)
    assert limits == pytest.approx({"filebeat": 0.06 * 1.25 + 0.05, "logstash": 0.3 * 1.25 + 0.05})


def test_the_per_event_part_follows_the_load_and_the_extra_cores_do_not():
    busy, quiet = (BudgetLimits(CpuBudget(), None, REFERENCE).at(eps)["filebeat"] for eps in (600.0, 30.0))
    assert busy == pytest.approx(0.12 * 1.25 + 0.05)  # a busier hour is not a breach
    assert quiet == pytest.approx(0.006 * 1.25 + 0.05)  # a scan's cost is not one either


def test_a_cap_binds_where_it_is_below_the_relative_limit_and_holds_before_any_reference():
    budget = CpuBudget(cores={"filebeat": 0.1})
    assert BudgetLimits(budget, None, REFERENCE).at(600.0)["filebeat"] == 0.1
    assert BudgetLimits(budget, None, None).at(600.0) == {"filebeat": 0.1}


def test_a_lifted_budget_limits_nothing():
    assert BudgetLimits(None, None, REFERENCE).at(300.0) == {}
    assert Policy(cpu_budget=None).cpu_budget is None and Policy().cpu_budget == CpuBudget()  # on by default


def test_the_reference_is_the_budgeted_parts_of_a_window_with_load():
    window = Observation(30.0, 300.0, 300.0, 0.1, 0.2, 0.3, 0.1, cpu_cores={"filebeat": 0.05, "broker-1": 0.4})
    assert CostReference.of(window) == CostReference(300.0, {"filebeat": 0.05})
    assert CostReference.of(Observation(30.0, 0.0, 0.0, 0, 0, 0, 0, cpu_cores={"filebeat": 0.01})) is None


@pytest.mark.parametrize("budget, field", [({"cores": {"kafka": 1.0}}, "cpu_budget.cores"),
                                           ({"cores": {"filebeat": 0}}, "cpu_budget.cores.filebeat"),
                                           ({"extra_cores": -0.1}, "cpu_budget.extra_cores")])
def test_a_budget_out_of_range_is_refused_naming_the_field(budget, field):
    with pytest.raises(ValidationError) as err:
        Policy(cpu_budget=budget)
    assert field in str(err.value)


def test_a_reading_is_within_limits_when_every_limited_part_is_and_only_budgeted_parts_count():
    reading = {"filebeat": 0.05, "logstash": 0.4, "broker-1": 2.0}
    assert budgeted(reading) == {"filebeat": 0.05, "logstash": 0.4}
    assert within_limits(reading, {"filebeat": 0.06, "logstash": 0.4})
    assert not within_limits(reading, {"filebeat": 0.04})
    assert within_limits({}, {"filebeat": 0.01})  # a part not measured used nothing
    used = {"logstash": 0.42789540982689017}  # / 300 * 300 rounds below itself
    own = BudgetLimits(CpuBudget(over_start=0.0, extra_cores=0.0), None, CostReference(300.0, used))
    assert own.at(300.0)["logstash"] < used["logstash"]
    assert within_limits(used, own.at(300.0))  # the start is within its own CPU, rounding aside


def test_a_window_gives_its_produce_requests_beside_the_budgeted_parts_cpu():
    window = Observation(30.0, 300.0, 300.0, 0.1, 0.2, 0.3, 0.1, cpu_cores={"filebeat": 0.05, "broker-1": 0.4},
                         produce_requests_per_s=15.0)
    assert budgeted_costs(window) == {"filebeat": 0.05, REQUESTS: 15.0}
    assert CostReference.of(window) == CostReference(300.0, {"filebeat": 0.05, REQUESTS: 15.0})


def test_the_request_budget_is_off_by_default_and_follows_the_starts_requests_per_event_when_set():
    reference = CostReference(300.0, {"filebeat": 0.06, REQUESTS: 15.0})  # one Produce request per 20 events
    assert Policy().request_budget is None
    assert REQUESTS not in BudgetLimits(CpuBudget(), None, reference).at(300.0)
    limits = BudgetLimits(None, RequestBudget(), reference)
    assert limits.at(600.0) == pytest.approx({REQUESTS: 30.0 * 2.0 + 10.0})  # twice per event, and 10/s on top
    assert limits.at(30.0) == pytest.approx({REQUESTS: 1.5 * 2.0 + 10.0})
    capped = BudgetLimits(None, RequestBudget(per_s=50.0), reference)
    assert capped.at(600.0) == {REQUESTS: 50.0} and capped.at(30.0) == pytest.approx({REQUESTS: 13.0})
    assert BudgetLimits(None, RequestBudget(per_s=50.0), None).at(600.0) == {REQUESTS: 50.0}  # before a reference


@pytest.mark.parametrize("budget, field", [({"per_s": 0}, "request_budget.per_s"),
                                           ({"extra_per_s": -1}, "request_budget.extra_per_s"),
                                           ({"flushes": 3}, "request_budget.flushes")])
def test_a_request_budget_out_of_range_is_refused_naming_the_field(budget, field):
    with pytest.raises(ValidationError) as err:
        Policy(request_budget=budget)
    assert field in str(err.value)


def test_the_reference_is_the_mean_cost_per_event_of_the_windows_of_the_start():
    first = Observation(30.0, 300.0, 300.0, 0.1, 0.2, 0.3, 0.1, cpu_cores={"filebeat": 0.06, "logstash": 0.3})
    busier = Observation(30.0, 600.0, 600.0, 0.1, 0.2, 0.3, 0.1, cpu_cores={"filebeat": 0.18})  # 1.5x per event
    reference = CostReference.of(first).with_window(busier)
    assert reference.windows == 2 and reference.offered_eps == 450.0
    assert reference.costs["filebeat"] / 450.0 == pytest.approx(0.00025)  # the mean of 0.0002 and 0.0003 per event
    assert reference.costs["logstash"] / 450.0 == pytest.approx(0.001)  # not measured the second time: kept
    idle = Observation(30.0, 0.0, 0.0, 0, 0, 0, 0, cpu_cores={"filebeat": 0.01})
    assert reference.with_window(idle) == reference  # a window without load says nothing per event


def test_the_noise_of_a_reading_starts_at_the_prior_and_moves_to_what_pairs_of_windows_measure():
    assert CostNoise().sd("filebeat") == pytest.approx(NOISE_PRIOR_SD)
    noise = CostNoise()
    for _ in range(200):  # windows alternating 2 % above and below: a window's log sd about 0.02
        noise = noise.with_pair({"filebeat": 1.0, "logstash": 1.0}, {"filebeat": math.exp(0.02 * 2 ** 0.5)})
    assert noise.pairs == {"filebeat": 200} and noise.sd("logstash") == pytest.approx(NOISE_PRIOR_SD)
    assert noise.sd("filebeat") == pytest.approx(math.sqrt((NOISE_PRIOR_SD**2 + 200 * 0.02**2) / 201))  # 0.020


def test_a_reading_may_exceed_its_limit_by_three_sds_of_its_difference_from_a_reference_of_few_windows():
    limits = {"filebeat": 0.1}
    one, many = CostReference(300.0, {"filebeat": 0.05}, 1), CostReference(300.0, {"filebeat": 0.05}, 1000)
    assert CostNoise().allowances(limits, one)["filebeat"] == pytest.approx(math.expm1(0.15 * 2 ** 0.5))  # 24 %
    assert CostNoise().allowances(limits, many)["filebeat"] == pytest.approx(math.expm1(0.15), rel=1e-3)  # 16 %
