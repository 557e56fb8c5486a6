"""What the probe makes of each record: event time by the configured format, hop stamps, the node,
untimed and backfill events kept apart, resolution, heartbeats, sampling and clock offsets."""

import json

import pytest

from agents.probe.consumer import ProbeOptions, RecordReader
from agents.probe.events import Record, decode_record, heartbeat_of, latencies
from agents.probe.ledger import Ledger
from agents.probe.metrics import ProbeMetrics
from models.clock_offset import ClockOffset, offsets_document
from models.event_time import COMBINED_TIME_REGEX, EventTimeSpec
from tests.clock import VirtualClock

NOW = 1_800_000_000.0


def filebeat(line: str, read_at: float | None = None, host: str | None = "web-1") -> bytes:
    """A record as Filebeat's Kafka output writes it."""
    event = {"message": line, "agent": {"name": "fb-agent", "type": "filebeat"}, "log": {"offset": 0}}
    if read_at is not None:
        from datetime import datetime, timezone
        event["@timestamp"] = datetime.fromtimestamp(read_at, tz=timezone.utc).isoformat(timespec="milliseconds")
    if host is not None:
        event["host"] = {"name": host}
    return json.dumps(event).encode()


def value(metrics: ProbeMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def reader(clock: VirtualClock, **options) -> tuple[RecordReader, ProbeMetrics]:
    metrics = ProbeMetrics()
    return RecordReader(metrics, Ledger(late_after_s=10), ProbeOptions(**options), clock.time), metrics


def test_filebeat_record_gives_every_stage_and_the_node():
    line = json.dumps({"request_id": "run-a-00000003", "ts_nginx": 100.0})
    record = decode_record(filebeat(line, read_at=100.25), kafka_timestamp_ms=100_400)
    assert record.node == "web-1" and record.line["request_id"] == "run-a-00000003"
    assert latencies(100.0, record, received_at=100.5) == pytest.approx(
        {"e2e": 0.5, "filebeat_read": 0.25, "filebeat_publish": 0.15, "kafka_consume": 0.1})


def test_a_record_without_the_append_time_measures_filebeats_publish_and_the_consume_as_one_stage():
    """Issue 39: on a CreateTime topic the record's timestamp is Filebeat's own read time; taken as the append, it
    put Filebeat's flush wait in `kafka_consume`."""
    record = decode_record(filebeat(json.dumps({"ts_nginx": 100.0}), read_at=100.25), kafka_timestamp_ms=None)
    assert latencies(100.0, record, received_at=100.5) == pytest.approx(
        {"e2e": 0.5, "filebeat_read": 0.25, "filebeat_publish+kafka_consume": 0.25})
    unread = decode_record(filebeat(json.dumps({"ts_nginx": 100.0})), kafka_timestamp_ms=100_400)  # no @timestamp
    assert latencies(100.0, unread, received_at=100.5) == pytest.approx(
        {"e2e": 0.5, "filebeat_read+filebeat_publish": 0.4, "kafka_consume": 0.1})


def test_node_falls_back_to_the_agent_name_and_missing_stamps_are_skipped():
    record = decode_record(filebeat("{}", host=None), None)
    assert record.node == "fb-agent"
    decoded = decode_record(json.dumps({"ts_nginx": 5}).encode(), None)  # fields at the top level
    assert decoded.node == "" and latencies(5.0, decoded, 6.0) == {"e2e": 1.0}


def test_plain_lines_stay_text_unless_they_are_heartbeats():
    assert decode_record(filebeat("1.2.3.4 - - [x]"), None, json_lines=False).line == "1.2.3.4 - - [x]"
    canary = '{"pipetune_canary": {"node": "n1", "seq": 7, "ts_ms": 1500}}'
    assert heartbeat_of(decode_record(filebeat(canary), None, json_lines=False).line).seq == 7


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]"])
def test_records_that_are_not_json_events_are_unparsed(raw):
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock)
    probe.read([(raw, None)], clock.time())
    assert value(metrics, "pipetune_unparsed_events_total") == 1
    assert value(metrics, "pipetune_records_total") == 1 and value(metrics, "pipetune_events_total") == 0


def test_msec_events_are_measured_by_node_and_source():
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock, event_time=EventTimeSpec("epoch_s", field="msec"))
    line = json.dumps({"msec": "1799999999.959", "request": "GET / HTTP/1.1"})  # 41 ms before NOW
    probe.read([(filebeat(line, read_at=NOW - 0.02), int((NOW - 0.01) * 1000))], clock.time())
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    # A stamp truncated to the ms: the write was on average mid-way through that millisecond.
    assert value(metrics, "pipetune_e2e_latency_seconds_sum", **labels) == pytest.approx(0.0405, abs=1e-5)
    assert value(metrics, "pipetune_e2e_latency_seconds_count", **labels | {"stage": "kafka_consume"}) == 1
    assert value(metrics, "pipetune_events_total") == 1
    probe.end_pass()
    assert value(metrics, "pipetune_event_time_resolution_seconds") == 0.001


def test_combined_lines_report_one_second_resolution():
    clock = VirtualClock(1431857103.7)
    probe, metrics = reader(clock, event_time=EventTimeSpec("time_local", regex=COMBINED_TIME_REGEX))
    line = '10.0.0.1 - - [17/May/2015:10:05:03 +0000] "GET /a HTTP/1.1" 200 5 "-" "x"'
    probe.read([(filebeat(line), None)], clock.time())
    probe.end_pass()
    assert value(metrics, "pipetune_event_time_resolution_seconds") == 1.0
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    assert value(metrics, "pipetune_e2e_latency_seconds_sum", **labels) == pytest.approx(0.2)  # 0.7 − 0.5


def test_untimed_events_are_counted_and_logged_not_measured(caplog):
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock)
    probe.read([(filebeat(json.dumps({"request_id": "r-00000001"})), None),
                (filebeat(json.dumps({"ts_nginx": "soon"})), None), (filebeat("plain"), None)], clock.time())
    assert value(metrics, "pipetune_untimed_events_total") == 3
    assert value(metrics, "pipetune_events_total") == 0 and value(metrics, "pipetune_records_total") == 3
    clock.advance(11)
    with caplog.at_level("WARNING", logger="pipetune.probe"):
        probe.end_pass()
    assert "3 events without a readable event time" in caplog.text and "ts_nginx" in caplog.text


def test_backfill_and_future_events_are_counted_apart_from_the_histograms():
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock, backfill_after_s=600, future_tolerance_s=2)
    lines = [NOW - 3 * 3600, NOW - 601, NOW + 30, NOW - 1.0, NOW + 1.0]  # two past, one future, two in range
    probe.read([(filebeat(json.dumps({"ts_nginx": ts})), None) for ts in lines], clock.time())
    assert value(metrics, "pipetune_backfill_events_total", kind="past") == 2
    assert value(metrics, "pipetune_backfill_events_total", kind="future") == 1
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    assert value(metrics, "pipetune_e2e_latency_seconds_count", **labels) == 2
    assert value(metrics, "pipetune_events_total") == 2


def test_heartbeats_are_measured_per_node_and_losses_wait_for_the_grace():
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock, canary_grace_s=30)

    def canary(node, seq, age_s=0.02):
        line = json.dumps({"pipetune_canary": {"node": node, "seq": seq, "ts_ms": int((clock.now - age_s) * 1000)}})
        return filebeat(line, host=node), None

    probe.read([canary("n1", 1), canary("n1", 2), canary("n1", 5), canary("n1", 2), canary("n2", 40)], clock.time())
    labels = {"stage": "e2e", "source": "canary", "node": "n1"}
    assert value(metrics, "pipetune_e2e_latency_seconds_count", **labels) == 3
    assert value(metrics, "pipetune_canary_received_total", node="n1") == 4
    assert value(metrics, "pipetune_canary_duplicate_total", node="n1") == 1
    assert value(metrics, "pipetune_events_total") == 0  # canaries are not the traffic
    clock.advance(29)
    probe.read([canary("n1", 3)], clock.time())  # late, within the grace: not lost
    probe.end_pass()
    assert value(metrics, "pipetune_canary_lost_total", node="n1") == 0
    clock.advance(1)
    probe.end_pass()
    assert value(metrics, "pipetune_canary_lost_total", node="n1") == 1  # seq 4, once the grace is over
    clock.advance(60)
    probe.end_pass()
    assert value(metrics, "pipetune_canary_lost_total", node="n1") == 1
    assert value(metrics, "pipetune_canary_lost_total", node="n2") == 0


def test_above_the_sampling_rate_one_event_in_n_is_observed_and_counted_n_times():
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock, sample_above_eps=100)
    batch = [(filebeat(json.dumps({"ts_nginx": NOW - 0.01})), None) for _ in range(400)]
    probe.read(batch, clock.time())
    clock.advance(1)
    probe.end_pass()  # 400 records/s against 100: every 4th
    assert value(metrics, "pipetune_sampling_stride") == 4
    canary = json.dumps({"pipetune_canary": {"node": "n1", "seq": 1, "ts_ms": int(NOW * 1000)}})
    probe.read(batch + [(filebeat(canary), None)], clock.time())
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    assert value(metrics, "pipetune_e2e_latency_seconds_count", **labels) == 400 + 100
    assert value(metrics, "pipetune_events_total") == 800
    assert value(metrics, "pipetune_canary_received_total", node="n1") == 1  # never sampled out
    assert value(metrics, "pipetune_records_total") == 801
    assert value(metrics, "pipetune_node_records_total", node="web-1") == 800
    assert value(metrics, "pipetune_node_records_total", node="n1") == 1  # the canary's node, as its latencies


def test_records_are_counted_by_node_exactly_in_sum_when_sampled():
    """A pool's throughput is its nodes' records; sampled-out records count for the next event observed."""
    clock = VirtualClock(NOW)
    probe, metrics = reader(clock, sample_above_eps=100)
    event = json.dumps({"ts_nginx": NOW - 0.01})
    probe.read([(filebeat(event, host="web-1"), None)] * 3 + [(filebeat(event, host="web-2"), None)] * 2
               + [(b"not json", None)], clock.time())
    assert [value(metrics, "pipetune_node_records_total", node=n) for n in ("web-1", "web-2", "")] == [3, 2, 1]
    clock.advance(1)
    probe.end_pass()  # 6 records/s against 100: still every event
    batch = [(filebeat(event, host=("web-1", "web-2")[k // 200]), None) for k in range(400)]
    probe.read(batch * 2, clock.time())
    clock.advance(1)
    probe.end_pass()  # 800 records/s against 100: one in 8
    assert value(metrics, "pipetune_sampling_stride") == 8
    before = {n: value(metrics, "pipetune_node_records_total", node=n) for n in ("web-1", "web-2")}
    probe.read(batch + batch[:3], clock.time())  # 200 of web-1, 200 of web-2, then 3 of web-1
    added = {n: value(metrics, "pipetune_node_records_total", node=n) - before[n] for n in before}
    assert sum(added.values()) == 403 and value(metrics, "pipetune_records_total") == 6 + 800 + 403  # exact in sum
    assert added["web-1"] == pytest.approx(203, abs=8) and added["web-2"] == pytest.approx(200, abs=8)


def test_clock_offsets_are_applied_per_node_and_reread(tmp_path):
    clock = VirtualClock(NOW)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps(offsets_document({"web-1": ClockOffset(0.5, 0.001, NOW)})))
    probe, metrics = reader(clock, clock_offsets=offsets)
    assert value(metrics, "pipetune_clock_offset_seconds", node="web-1") == 0.5
    # web-1's clock is 0.5 s ahead: a line it stamped 0.45 s in our future was written 50 ms ago.
    probe.read([(filebeat(json.dumps({"ts_nginx": NOW + 0.45})), None),
                (filebeat(json.dumps({"ts_nginx": NOW - 0.05}), host="web-2"), None)], clock.time())
    for node in ("web-1", "web-2"):
        labels = {"stage": "e2e", "source": "event_time", "node": node}
        assert value(metrics, "pipetune_e2e_latency_seconds_sum", **labels) == pytest.approx(0.05, abs=1e-3)
    offsets.write_text("{broken")
    probe.end_pass()
    assert value(metrics, "pipetune_clock_offset_seconds", node="web-1") == 0.5  # a broken file changes nothing


def test_an_offset_within_its_error_bound_is_not_applied(tmp_path):
    clock = VirtualClock(NOW)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps(offsets_document({"web-1": ClockOffset(0.0002, 0.001, NOW)})))
    probe, metrics = reader(clock, clock_offsets=offsets)
    probe.read([(filebeat(json.dumps({"ts_nginx": NOW - 0.003})), None)], clock.time())
    labels = {"stage": "e2e", "source": "event_time", "node": "web-1"}
    # stamped 3 ms ago to the ms: written on average mid-step, 2.5 ms ago (2.7 with the offset taken off)
    assert value(metrics, "pipetune_e2e_latency_seconds_sum", **labels) == pytest.approx(0.0025, abs=1e-6)
    assert value(metrics, "pipetune_clock_offset_seconds", node="web-1") == 0.0


def test_a_stamp_in_the_past_record_is_the_nodes_read_time():
    record = Record({"t": 1}, ts_filebeat=10.6, ts_kafka=10.7, node="n")
    assert latencies(10.0, record, 10.8, clock_offset_s=0.5)["filebeat_read"] == pytest.approx(0.1)
