"""A window the Kafka cluster disturbed, read from what each broker's exporter said over it: a broker that stopped
answering, leaders that moved, partitions under-replicated or offline. A steady cluster, or a lag rise alone, is no
disturbance. A node's clock that stepped in the window disturbs it too; one that drifted within what its P95 bears
does not. A component that started anew in it (not restarted by pipetune) disturbs it too."""

from __future__ import annotations

import math

from models.clock_offset import ClockMove
from models.disturbance import (MISSED_SCRAPES, BrokerWindow, Cause, clock_disturbance, combined, disturbance,
                                restart_disturbance)

STEADY = {b: BrokerWindow(leaders_from=n, leaders_to=n) for b, n in (("1", 16), ("2", 18), ("3", 17))}


def test_a_whole_and_steady_cluster_is_no_disturbance_whatever_the_lag_did():
    assert disturbance(STEADY) is None
    # the group falling behind is what a slow consumer config does too: the verdict's backlog rule judges it
    assert disturbance(STEADY, lag_rise_events=5000) is None
    assert disturbance({}) is None  # a cluster that exports nothing is never read as disturbed


def test_a_broker_that_stops_answering_its_scrapes_disturbs_but_one_slow_scrape_does_not():
    slow = STEADY | {"2": BrokerWindow(missed_scrapes=MISSED_SCRAPES - 1, leaders_from=18, leaders_to=18)}
    assert disturbance(slow) is None
    gone = STEADY | {"2": BrokerWindow(missed_scrapes=7, leaders_from=18, leaders_to=18)}
    found = disturbance(gone)
    assert found.causes == (Cause.BROKER_SILENT,) and found.brokers == ("2",)
    assert str(found) == "broker silent: broker 2 missed 7 scrapes"


def test_a_leader_change_names_each_broker_whose_partitions_moved():
    moved = STEADY | {"1": BrokerWindow(leader_changes=1, leaders_from=16, leaders_to=24),
                      "3": BrokerWindow(leader_changes=2, leaders_from=17, leaders_to=math.nan)}
    found = disturbance(moved)
    assert found.causes == (Cause.LEADER_CHANGE,) and found.brokers == ("1", "3")
    assert str(found) == "leader change: broker 1 leads 16 → 24 partitions, broker 3 leads 17 → ? partitions"
    # moved between the last scrape before the window and its first: no change inside it, but not where it began
    at_start = STEADY | {"2": BrokerWindow(leaders_from=18, leaders_to=0)}
    assert str(disturbance(at_start)) == "leader change: broker 2 leads 18 → 0 partitions"


def test_under_replicated_or_offline_partitions_disturb_on_their_own():
    lagging = STEADY | {"3": BrokerWindow(leaders_from=17, leaders_to=17, under_replicated=4)}
    assert str(disturbance(lagging)) == "under-replicated partitions: 4 on broker 3"
    found = disturbance(STEADY, offline_partitions=2)
    assert found.causes == (Cause.OFFLINE,) and found.brokers == ()
    assert str(found) == "offline partitions: 2 without a leader"


def test_a_lost_leader_says_every_cause_and_the_lag_rise_beside_them():
    """Broker 2 killed: it stops answering, the controller moves its partitions to 1 and 3, which lead them without
    it in sync; the group's lag rose meanwhile."""
    lost = {"1": BrokerWindow(leader_changes=1, leaders_from=16, leaders_to=24, under_replicated=24),
            "2": BrokerWindow(missed_scrapes=8, leaders_from=18, leaders_to=18),
            "3": BrokerWindow(leader_changes=1, leaders_from=17, leaders_to=27, under_replicated=27)}
    found = disturbance(lost, lag_rise_events=340.4)
    assert found.causes == (Cause.BROKER_SILENT, Cause.LEADER_CHANGE, Cause.UNDER_REPLICATED)
    assert found.brokers == ("1", "2", "3")
    assert str(found) == ("broker silent: broker 2 missed 8 scrapes; leader change: broker 1 leads 16 → 24 partitions, "
                          "broker 3 leads 17 → 27 partitions; under-replicated partitions: 24 on broker 1, 27 on broker "
                          "3; consumer lag rose 340 events")


def test_brokers_are_named_in_the_order_of_their_ids():
    found = disturbance({"10": BrokerWindow(under_replicated=1), "2": BrokerWindow(under_replicated=3)})
    assert found.brokers == ("2", "10")
    assert str(found) == "under-replicated partitions: 3 on broker 2, 1 on broker 10"


def test_a_clock_that_stepped_disturbs_the_window_naming_its_node_and_a_steady_or_drifting_one_does_not():
    steady, drifted = ClockMove(0.0003, 0.001), ClockMove(0.004, 0.001)  # 4 ms of drift in a 60 ms window
    assert clock_disturbance({"node-1": steady, "node-2": drifted}, 0.060, 0.001) is None
    found = clock_disturbance({"node-1": steady, "node-2": ClockMove(2.0004, 0.0012)}, 0.060, 0.001)
    assert found.causes == (Cause.CLOCK_STEP,) and found.nodes == ("node-2",) and found.brokers == ()
    assert str(found) == ("clock step: node node-2's clock moved +2000 ms (± 1 ms), its events' latencies with it")
    assert clock_disturbance({}, 0.060, 0.001) is None


def test_a_window_both_a_broker_and_a_clock_disturbed_says_both():
    broker = disturbance(STEADY | {"2": BrokerWindow(missed_scrapes=7, leaders_from=18, leaders_to=18)})
    clock = clock_disturbance({"node-2": ClockMove(-2.0, 0.001)}, 0.060, 0.001)
    both = combined(broker, clock)
    assert both.causes == (Cause.BROKER_SILENT, Cause.CLOCK_STEP)
    assert (both.brokers, both.nodes) == (("2",), ("node-2",))
    assert str(both) == f"{broker}; {clock}"
    assert combined(None, clock) is clock and combined(broker, None) is broker and combined(None, None) is None


def test_the_window_after_a_clock_step_says_the_step_was_found_as_the_window_before_ended():
    found = clock_disturbance({"node-2": ClockMove(-2.0, 0.002, before_window=True)}, 0.060, 0.001)
    assert found.causes == (Cause.CLOCK_STEP,) and found.nodes == ("node-2",)
    assert str(found) == ("clock step: node node-2's clock moved -2000 ms (± 2 ms) as the window before ended (the "
                          "probe applies its new offset a second or so later), its events' latencies with it")


def test_a_component_that_started_anew_in_the_window_disturbs_it_naming_the_component():
    assert restart_disturbance({}) is None and restart_disturbance({"filebeat": 0}) is None
    found = restart_disturbance({"filebeat": 1, "logstash": 0})
    assert found is not None and found.causes == (Cause.RESTARTED,)
    assert str(found) == "restarted outside pipetune: filebeat started 1 time in the window"
    assert "filebeat started 2 times" in str(restart_disturbance({"filebeat": 2}))
