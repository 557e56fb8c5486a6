"""Splitting a change by the agent's components, and matching the daemon's decision log against the agent's
audit (`controller.agent_changes`)."""

from agents.filebeat import adapter as filebeat_adapter
from agents.kafka.broker import KafkaBrokerAdapter
from agents.kafka.client import KafkaConsumerAdapter
from controller.agent_changes import by_component, changes_for_agent, changes_not_in_audit, owned_params

# What the testbed's agent reports of its components (`GET /components`, trimmed to what the rule reads).
COMPONENTS = [{"name": name, "params_allowed": {p.name: {} for p in params}}
              for name, params in (("filebeat", filebeat_adapter.PARAMS), ("kafka", KafkaBrokerAdapter.params),
                                   ("probe", KafkaConsumerAdapter.params))]
OWNED = owned_params(COMPONENTS)


def _decision(reason: str = "optimistic gain", **change) -> dict:
    return {"reason": reason, "change": {name.replace("__", "."): [None, to] for name, to in change.items()}}


def _started(**params) -> dict:
    return {"event": "change_started", "changes": {name.replace("__", "."): v for name, v in params.items()}}


FILEBEAT_AND_CONSUMER = _decision(**{"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.timeout": 0.1,
                                     "kafka.consumer.fetch.max.wait.ms": 50})


def test_a_change_to_two_components_matches_one_version_in_each_components_log():
    audit = {"filebeat": [_started(**{"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.timeout": 0.1})],
             "probe": [_started(**{"kafka.consumer.fetch.max.wait.ms": 50})], "kafka": []}
    assert changes_not_in_audit([FILEBEAT_AND_CONSUMER], audit, OWNED) == []


def test_a_component_whose_log_lacks_its_part_of_the_change_is_reported():
    audit = {"filebeat": [_started(**{"filebeat.backoff": 0.01, "filebeat.queue.mem.flush.timeout": 0.1})],
             "probe": [_started(**{"kafka.consumer.fetch.max.wait.ms": 500})], "kafka": []}
    assert changes_not_in_audit([FILEBEAT_AND_CONSUMER], audit, OWNED) == [FILEBEAT_AND_CONSUMER]


def test_a_change_refused_at_the_agents_checks_is_one_of_its_rejections():
    refused = _decision("apply failed (filebeat change rejected: ...)", **{"filebeat.backoff": 0.01})
    assert changes_not_in_audit([refused], {"filebeat": [{"event": "rejected", "changes": {}}]}, OWNED) == []
    assert changes_not_in_audit([refused], {"filebeat": []}, OWNED) == [refused]


def test_changes_to_parameters_no_agent_component_owns_are_not_the_agents():
    twin_only = _decision(**{"spark.trigger.interval": 0.5})
    assert changes_for_agent([twin_only, FILEBEAT_AND_CONSUMER], OWNED) == [FILEBEAT_AND_CONSUMER]
    assert changes_not_in_audit([twin_only], {"filebeat": []}, OWNED) == []


def test_a_change_goes_to_each_component_that_takes_one_of_its_parameters():
    change = {"filebeat.backoff": 0.01, "kafka.consumer.fetch.max.wait.ms": 50, "logstash.pipeline.workers": 2}
    assert by_component(change, OWNED) == {"filebeat": {"filebeat.backoff": 0.01},
                                           "probe": {"kafka.consumer.fetch.max.wait.ms": 50}}
    # Two components taking the same parameter (two consumers on one node) both get it.
    other = {"name": "other-consumer", "params_allowed": {"kafka.consumer.fetch.max.wait.ms": {}}}
    two = owned_params([*COMPONENTS, other])
    assert by_component(change, two)["other-consumer"] == {"kafka.consumer.fetch.max.wait.ms": 50}
