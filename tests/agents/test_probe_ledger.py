"""The probe's ledger: lost, duplicate and late events of each replay run."""

import json

from agents.probe.ledger import Ledger, Manifest, split_request_id
from agents.probe.metrics import ProbeMetrics
from agents.probe.runs import RunTracker, read_report


def _manifest(run_id="run-a", events=5, started_at=1000.0, duration_s=10.0) -> Manifest:
    return Manifest(run_id, events, 0, events - 1, started_at, duration_s)


def test_request_id_split_keeps_dashes_of_the_run_id():
    assert split_request_id("run-a-00000042") == ("run-a", 42)
    assert split_request_id("no-sequence-here") is None


def test_report_counts_lost_duplicate_and_late():
    ledger = Ledger(late_after_s=5.0)
    manifest = _manifest()
    ledger.add_manifest(manifest)
    for seq, when in [(0, 1001.0), (1, 1002.0), (1, 1003.0), (3, 1016.0), (9, 1004.0)]:
        ledger.record(manifest.request_id(seq), when)
    report = ledger.report("run-a", now=1012.0)
    assert (report.expected, report.received, report.lost_events) == (5, 3, 2)
    assert report.lost_sample == ["run-a-00000002", "run-a-00000004"]
    assert report.duplicate_events == 1 and report.late_events == 1
    assert not report.complete and not report.final
    assert ledger.report("run-a", now=1015.1).final


def test_tracker_writes_reports_and_counts_lost_once(tmp_path):
    manifests, reports = tmp_path / "manifests", tmp_path / "reports"
    manifests.mkdir()
    ledger, metrics = Ledger(late_after_s=1.0), ProbeMetrics()
    tracker = RunTracker(ledger, metrics, manifests, reports)
    (manifests / "run-a.json").write_text(json.dumps({"run_id": "run-a", "events": 3, "first_seq": 0, "last_seq": 2,
                                                      "started_at": 0.0, "duration_s": 1.0}))
    (manifests / "broken.json").write_text(json.dumps({"run_id": "broken"}))
    tracker.scan()
    ledger.record("run-a-00000000", 0.5)
    tracker.write_reports(now=5.0)
    tracker.write_reports(now=6.0)
    assert read_report(reports, "run-a").lost_events == 2
    assert metrics.registry.get_sample_value("pipetune_lost_events_total") == 2
    # A restarted probe leaves a finished run alone instead of declaring all of it lost again.
    fresh = Ledger(late_after_s=1.0)
    RunTracker(fresh, ProbeMetrics(), manifests, reports).scan()
    assert fresh.manifests() == []


def test_late_arrivals_update_a_final_report_but_not_the_lost_counter(tmp_path):
    manifests, reports = tmp_path / "manifests", tmp_path / "reports"
    manifests.mkdir()
    ledger, metrics = Ledger(late_after_s=1.0), ProbeMetrics()
    tracker = RunTracker(ledger, metrics, manifests, reports)
    (manifests / "run-b.json").write_text(json.dumps({"run_id": "run-b", "events": 2, "first_seq": 0, "last_seq": 1,
                                                      "started_at": 0.0, "duration_s": 1.0}))
    tracker.scan()
    ledger.record("run-b-00000000", 0.5)
    tracker.write_reports(now=3.0)
    assert read_report(reports, "run-b").lost_events == 1
    ledger.record("run-b-00000001", 4.0)
    tracker.write_reports(now=4.5)
    late = read_report(reports, "run-b")
    assert (late.lost_events, late.late_events, late.complete, late.final) == (0, 1, True, True)
    assert metrics.registry.get_sample_value("pipetune_lost_events_total") == 1


def test_a_recreated_probe_carries_on_counting_an_open_run(tmp_path):
    before = Ledger(late_after_s=5.0)
    manifest = _manifest(events=4)
    before.add_manifest(manifest)
    for seq in (0, 1, 1):
        before.record(manifest.request_id(seq), 1001.0)
    before.record("other-00000000", 1001.0)  # a run whose manifest is not written yet
    before.save(tmp_path / "ledger.checkpoint", now=1002.0)

    after = Ledger.load(tmp_path / "ledger.checkpoint", late_after_s=5.0)
    after.add_manifest(manifest)
    for seq in (2, 3):
        after.record(manifest.request_id(seq), 1003.0)
    report = after.report("run-a", now=1020.0)
    assert (report.received, report.lost_events, report.duplicate_events) == (4, 0, 1)
    assert after.arrivals("other") == 1


def test_a_run_that_turned_final_as_the_probe_stopped_is_reported_by_the_process_that_counted_it(tmp_path):
    # the agent restarted the probe 10 s after a run ended, as its grace period ran out: the next process found
    # the run final, none of its arrivals carried over, and reported all 20,000 events lost (bench.live)
    manifests, reports = tmp_path / "manifests", tmp_path / "reports"
    manifests.mkdir()
    ledger = Ledger(late_after_s=5.0)
    tracker = RunTracker(ledger, ProbeMetrics(), manifests, reports)
    (manifests / "run-a.json").write_text(json.dumps({"run_id": "run-a", "events": 3, "first_seq": 0, "last_seq": 2,
                                                      "started_at": 1000.0, "duration_s": 10.0}))
    tracker.scan()
    for seq in range(3):
        ledger.record(f"run-a-{seq:08d}", 1005.0)
    tracker.write_reports(now=1014.0)  # the last pass: the run is still open
    tracker.hand_over(reports / "ledger.checkpoint", now=1015.5)  # stopped just after its grace period ran out
    after = Ledger.load(reports / "ledger.checkpoint", late_after_s=5.0)
    RunTracker(after, ProbeMetrics(), manifests, reports).scan()
    assert after.manifests() == []  # the next process leaves the finished run alone
    report = read_report(reports, "run-a")
    assert (report.received, report.lost_events, report.final) == (3, 0, True)


def test_a_finished_run_is_not_carried_over_and_a_missing_checkpoint_is_a_fresh_ledger(tmp_path):
    ledger = Ledger(late_after_s=5.0)
    ledger.add_manifest(_manifest())
    ledger.record("run-a-00000000", 1001.0)
    ledger.save(tmp_path / "ledger.checkpoint", now=2000.0)
    assert Ledger.load(tmp_path / "ledger.checkpoint", 5.0).arrivals("run-a") == 0
    assert Ledger.load(tmp_path / "absent", 5.0).arrivals("run-a") == 0


def test_lag_comes_from_the_last_fetch_without_asking_the_broker():
    """The end of the partition as the last fetch told it: asking the broker would block the consume loop
    behind a long fetch.wait.max.ms, and delay (so mis-measure) every record waiting meanwhile."""
    from confluent_kafka import TopicPartition

    from agents.probe.consumer import Probe, RecordReader

    class Consumer:
        def __init__(self, high):
            self.high = high

        def assignment(self):
            return [TopicPartition("t", 0)]

        def get_watermark_offsets(self, part, cached=False):
            assert cached, "a broker request would block the consume loop"
            return 0, self.high

        def position(self, parts):
            return [TopicPartition("t", 0, 60)]

    probe = Probe.__new__(Probe)
    probe.reader = RecordReader(ProbeMetrics(), Ledger(late_after_s=1.0))
    probe.consumer = Consumer(high=-1001)  # librdkafka's "not known yet", before the first fetch
    probe.reader.metrics.lag.set(42)
    assert probe.update_lag() is None
    assert probe.reader.metrics.registry.get_sample_value("pipetune_kafka_consumer_lag_events") == 42
    probe.consumer = Consumer(high=100)
    assert probe.update_lag() == 40


def test_runs_whose_lines_carry_no_request_id_are_not_accounted(tmp_path):
    """A combined or nginx-json replay has nothing for the ledger: none of it is declared lost."""
    manifests, reports = tmp_path / "manifests", tmp_path / "reports"
    manifests.mkdir()
    ledger = Ledger(late_after_s=1.0)
    (manifests / "plain.json").write_text(json.dumps({"run_id": "plain", "events": 3, "first_seq": 0, "last_seq": 2,
                                                      "started_at": 0.0, "duration_s": 1.0,
                                                      "request_ids_in_lines": False}))
    tracker = RunTracker(ledger, ProbeMetrics(), manifests, reports)
    tracker.scan()
    assert tracker.write_reports(now=100.0) == [] and ledger.manifests() == []
