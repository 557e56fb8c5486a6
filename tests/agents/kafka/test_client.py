"""The Kafka client adapters without a broker: the producer parameters, the properties files they patch,
librdkafka's own check naming the property it refuses, and health for a client that serves no HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.adapter import ConfigStore, ValidationFailed
from agents.component import ManagedComponent
from agents.kafka.client import KafkaConsumerAdapter, KafkaProducerAdapter, check_properties, create_producer
from models.learning import TUNED_BY_TOPOLOGY
from models.presets import PRESETS, preset
from models.space import PIPELINE_SPACE, ChangeCost
from replay.sinks import PRODUCER_DEFAULTS


class FakeRuntime:
    def __init__(self) -> None:
        self.up = True

    def reload(self) -> None: ...

    def restart(self) -> None: ...

    def stop(self) -> None: ...

    def running(self) -> bool:
        return self.up


def producer(tmp_path: Path, health_url: str | None = None, text: str = "") -> KafkaProducerAdapter:
    """A producer adapter over `tmp_path/producer.properties`, holding `text`."""
    (tmp_path / "producer.properties").write_text(text)
    return KafkaProducerAdapter("replay", tmp_path / "producer.properties", health_url, FakeRuntime())


def test_producer_parameters_recreate_the_client_and_are_not_tuned():
    names = [p.name for p in KafkaProducerAdapter.params]
    assert names == ["kafka.producer.linger.ms", "kafka.producer.batch.size", "kafka.producer.acks",
                     "kafka.producer.compression.type"]
    assert {PIPELINE_SPACE[n].cost for n in names} == {ChangeCost.RESTART}
    assert not {n for tuned in TUNED_BY_TOPOLOGY.values() for n in tuned if n.startswith("kafka.producer.")}
    assert PIPELINE_SPACE["kafka.producer.acks"].choices == ("0", "1", "all")
    assert PIPELINE_SPACE["kafka.producer.batch.size"].log_scale
    # Presets change only what they name: the producer stays at its defaults in each.
    for name in PRESETS:
        assert {n: preset(name)[n] for n in names} == {n: PIPELINE_SPACE[n].default for n in names}


def test_an_empty_file_reads_as_what_the_replay_sink_sends_with_and_the_defaults_write_nothing_into_it(tmp_path):
    adapter = producer(tmp_path)
    found = adapter.read()
    assert {adapter.names[p]: adapter._text(PIPELINE_SPACE[p], v) for p, v in found.items()} == PRODUCER_DEFAULTS
    assert adapter.patch(PIPELINE_SPACE.defaults()) == {tmp_path / "producer.properties": ""}


def test_linger_keeps_its_fraction_while_whole_number_properties_are_rounded(tmp_path):
    config = PIPELINE_SPACE.config({"kafka.producer.linger.ms": 2.5, "kafka.producer.acks": "all",
                                    "kafka.consumer.fetch.max.wait.ms": 20.4})
    produced = producer(tmp_path).patch(config)[tmp_path / "producer.properties"].splitlines()
    assert produced == ["linger.ms=2.5", "acks=all"]  # the others hold their defaults: not written
    (tmp_path / "consumer.properties").write_text("")
    consumer = KafkaConsumerAdapter("probe", tmp_path / "consumer.properties", "http://127.0.0.1:1/")
    consumed = consumer.patch(config)[tmp_path / "consumer.properties"]
    assert consumed.splitlines() == ["fetch.wait.max.ms=20"]


def test_the_operators_file_keeps_every_other_byte(tmp_path):
    operator = ("# producer of the web tier\nbootstrap.servers = k1:9093,k2:9093\nlinger.ms: 5\n"
                "security.protocol=SASL_SSL\n\n! tuned by hand\nacks=all\n")
    adapter = producer(tmp_path, text=operator)
    config = PIPELINE_SPACE.config({"kafka.producer.linger.ms": 20, "kafka.producer.acks": "all"})
    patched = adapter.patch(config)[tmp_path / "producer.properties"]
    assert patched == ("# producer of the web tier\nbootstrap.servers = k1:9093,k2:9093\nlinger.ms: 20\n"
                       "security.protocol=SASL_SSL\n\n! tuned by hand\nacks=all\n")


def test_a_missing_properties_file_is_named(tmp_path):
    adapter = KafkaProducerAdapter("replay", tmp_path / "nowhere.properties", None, FakeRuntime())
    with pytest.raises(ValidationFailed, match="nowhere.properties: cannot read it"):
        adapter.patch(PIPELINE_SPACE.defaults())


def test_validate_accepts_what_librdkafka_accepts(tmp_path):
    adapter = producer(tmp_path)
    config = PIPELINE_SPACE.config({"kafka.producer.linger.ms": 0.5, "kafka.producer.compression.type": "zstd"})
    adapter.validate(adapter.patch(config))


@pytest.mark.parametrize("line, named, reason", [
    # librdkafka calls linger.ms queue.buffering.max.ms: the message still names the file's property.
    ("linger.ms=1000000", "linger.ms=1000000", "outside allowed range 0..900000"),
    ("batch.size=0", "batch.size=0", "outside allowed range 1..2147483647"),
    ("compresion.type=lz4", "compresion.type=lz4", 'No such configuration property: "compresion.type"'),
])
def test_validate_names_the_property_librdkafka_refuses(tmp_path, line, named, reason):
    adapter = producer(tmp_path)
    with pytest.raises(ValidationFailed) as err:
        adapter.validate({tmp_path / "producer.properties": f"acks=1\n{line}\n"})
    assert f"librdkafka refused {named}: " in str(err.value) and reason in str(err.value)


def test_check_properties_passes_a_good_set():
    check_properties(create_producer, {"linger.ms": "0", "acks": "all"})


def test_without_a_health_url_health_is_whether_the_process_runs(tmp_path):
    adapter = producer(tmp_path)
    assert adapter.health().ok and "no health_url" in adapter.health().detail
    adapter.runtime.up = False  # type: ignore[union-attr]
    assert not adapter.health().ok and "not running" in adapter.health().detail


def test_a_health_url_is_asked_when_given(tmp_path):
    adapter = producer(tmp_path, "http://127.0.0.1:1/metrics")  # nothing listens on port 1
    assert not adapter.health().ok and "127.0.0.1:1" in adapter.health().detail


def test_an_adapter_with_no_way_to_tell_health_is_refused(tmp_path):
    with pytest.raises(ValueError, match="health_url or the runtime"):
        KafkaProducerAdapter("replay", tmp_path)


class RecordingRuntime(FakeRuntime):
    """Notes what the client's file holds each time the process is stopped or (re)started."""

    def __init__(self, properties: Path) -> None:
        super().__init__()
        self.properties, self.seen = properties, []

    def stop(self) -> None:
        self.seen.append(("stop", self.properties.read_text()))

    def restart(self) -> None:
        self.seen.append(("restart", self.properties.read_text()))


def test_a_restart_stops_the_process_before_its_files_change(tmp_path):
    """A component that watches its own files (Filebeat's input reload) must not see the new ones while
    it still runs: it would put them in force itself, its own way (issue #14: a reload can lose a line)."""
    adapter = producer(tmp_path, text="linger.ms=5\n")
    runtime = RecordingRuntime(tmp_path / "producer.properties")
    component = ManagedComponent(adapter, runtime, ConfigStore(tmp_path / "state", "replay"), {}, settle_s=0)
    component.start()
    runtime.seen.clear()
    assert component.change(1, {"kafka.producer.linger.ms": 20}).status == "applied"
    [(first, before), (then, after)] = runtime.seen
    assert (first, then) == ("stop", "restart")
    assert "linger.ms=20" not in before and "linger.ms=20" in after


def test_a_change_after_the_operator_removed_the_file_is_rejected_and_the_version_stays(tmp_path):
    adapter = producer(tmp_path, text="acks=all\n")
    component = ManagedComponent(adapter, adapter.runtime, ConfigStore(tmp_path / "state", "replay"), {}, settle_s=0)
    component.start()
    (tmp_path / "producer.properties").unlink()
    result = component.change(1, {"kafka.producer.linger.ms": 20})
    assert (result.status, result.version) == ("rejected", 0)
    assert "producer.properties: cannot read it (No such file or directory)" in result.message
