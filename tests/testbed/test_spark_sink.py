"""The paper pipeline's sink for real: requests to a real nginx, its access log harvested by the session testbed's
Filebeat into its Kafka, read by a Spark Structured Streaming job (one per test session) into a Hive-format table;
every request nginx logged is in the table exactly once, and the `warehouse` stage's histograms count them; the
agent changes the job's trigger while requests flow (the query restarted from its checkpoint), and still every
request is in the table exactly once."""

from __future__ import annotations

import http.client
import json
import math
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from agents.client import AgentError
from agents.config import AgentConfig
from agents.kafka import properties_file
from testbed import processes
from testbed import agent
from testbed.nginx_source import SentLoad
from testbed.pipeline import PipelineSpec, load_pipeline, pipeline_file
from testbed.spark_sink import (JobSettings, Ledger, LedgerCheck, ledger, logged_request_ids, metrics_text, progress,
                                ready, spark_service)
from tests.agents.conftest import ServedAgent
from tests.conftest import free_ports

T = TypeVar("T")
WAIT_S = 300.0  # a bound on waits for Spark (its first batch compiles and warms up), never a figure asserted


def _polled(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, what: str, every_s: float = 0.5) -> T:
    """`read()` every `every_s` until `done` holds for what it returned, which is returned; failing names `what`."""
    deadline = time.monotonic() + timeout_s
    while not done(value := read()):
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(every_s)
    return value


def test_settings_name_the_field_and_the_allowed_range(tmp_path):
    base = {"bootstrap": "127.0.0.1:9092", "topic": "t", "home": tmp_path, "metrics_port": 19999}
    with pytest.raises(ValueError, match=r"master: 'locl\[2\]' is not a Spark master URL"):
        JobSettings(**base, master="locl[2]")
    with pytest.raises(ValueError, match="trigger_interval_s: 0.0, allowed 0.05 to 3600"):
        JobSettings(**base, trigger_interval_s=0.0)
    with pytest.raises(ValueError, match="max_offsets_per_trigger: 0"):
        JobSettings(**base, max_offsets_per_trigger=0)
    with pytest.raises(ValueError, match="spark_conf: sql.x do not start with 'spark.'"):
        JobSettings(**base, spark_conf={"sql.x": "1"})
    for master in ("local", "local[*]", "local[4]", "local[2,3]", "spark://10.0.0.1:7077", "yarn"):
        assert JobSettings(**base, master=master).master == master


def test_the_properties_carry_the_micro_batch_settings_and_the_connector(tmp_path):
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "kafka-clients-3.9.2.jar").touch()
    settings = JobSettings("127.0.0.1:9092", "nginx-access", tmp_path / "job", 19999, master="local[3]",
                           trigger_interval_s=2.5, max_offsets_per_trigger=500, shuffle_partitions=4)
    props = properties_file.read(settings.properties(libs))
    assert props["master"] == "local[3]" and props["trigger.interval.s"] == "2.5"
    assert props["maxOffsetsPerTrigger"] == "500" and props["spark.sql.shuffle.partitions"] == "4"
    assert props["connector.jars"] == str(libs / "kafka-clients-3.9.2.jar")
    assert props["checkpoint.dir"] == str(tmp_path / "job" / "checkpoint")


def test_the_ledger_names_what_is_missing_and_what_is_there_twice():
    table = Ledger(rows=4, counts={"a": 1, "b": 2, "x": 1})
    assert table.check(["a", "b", "c"]) == LedgerCheck(3, ["c"], {"b": 2})
    assert not table.check(["a", "b", "c"]).exact
    assert table.check(["a", "x"]).exact


def test_a_request_in_kafka_twice_is_the_shippers_resend_and_two_rows_of_one_record_the_jobs_duplicate():
    # r: two rows from two Kafka records (Filebeat sent it twice); j: two rows of one record; m: three rows of two
    table = Ledger(rows=8, counts={"r": 2, "j": 2, "m": 3, "a": 1}, kafka_records={"r": 2, "j": 1, "m": 2})
    check = table.check(["r", "j", "m", "a"])
    assert check.duplicated == {"j": 2, "m": 2} and check.resent == {"r": 2, "m": 2}
    assert not check.exact
    assert Ledger(rows=3, counts={"r": 2, "a": 1}, kafka_records={"r": 2}).check(["r", "a"]).exact  # the job's exact


def test_logged_request_ids_reads_from_an_offset(tmp_path):
    log = tmp_path / "access.log"
    log.write_text('{"request_id":"old"}\n')
    start = log.stat().st_size
    with open(log, "a") as out:
        out.write('{"request_id":"r1","uri":"/a"}\nnot json\n{"ts_nginx":1.0}\n{"request_id":"r2","uri":"/b"}\n')
    assert logged_request_ids(log, start) == ["r1", "r2"]
    assert logged_request_ids(log, start, uri="/b") == ["r2"]


def test_the_paper_pipelines_agent_holds_the_spark_job_on_its_own_file(tmp_path):
    """`up --pipeline paper`: the first node's agent manages the job (kind spark-query), with no starting values, so
    its first version is what the pipeline file's `spark:` wrote into the job's file."""
    spec = load_pipeline(pipeline_file("paper")).model_copy(update={"run_dir": tmp_path})
    agent.agent_service(spec, spec.node_layouts()[0], Path("/usr/bin/filebeat"), spec.start_config())  # starts none
    document = yaml.safe_load((agent.agent_dir(spec) / "agent.yaml").read_text())
    config = AgentConfig.model_validate(document)
    spark = [c for c in config.components if c.kind == "spark-query"]
    assert [(c.name, c.properties, c.url, c.params) for c in spark] == [
        ("spark", tmp_path / "spark" / "spark-job.properties", "http://127.0.0.1:19308", {})]


def _end_offsets(spec: PipelineSpec) -> str:
    """The topic's end offsets now, as Spark's `startingOffsets` JSON: the job reads what comes after."""
    consumer = Consumer({"bootstrap.servers": spec.bootstrap, "group.id": "pipetune-spark-test"})
    try:
        partitions = consumer.list_topics(spec.probe.topic, timeout=10).topics[spec.probe.topic].partitions
        ends = {str(p): consumer.get_watermark_offsets(TopicPartition(spec.probe.topic, p), timeout=10)[1]
                for p in partitions}
    finally:
        consumer.close()
    return json.dumps({spec.probe.topic: ends})


@pytest.fixture(scope="session")
def warehouse(testbed: PipelineSpec) -> Iterator[tuple[JobSettings, processes.Service]]:
    """One Spark job for the session on the session testbed's topic (from its end as the job starts), local[2]."""
    run = testbed.resolved_run_dir()
    settings = JobSettings(testbed.bootstrap, testbed.probe.topic, run / "spark", free_ports(1)[0],
                           starting_offsets=_end_offsets(testbed))
    service = spark_service(settings, run)
    processes.start(service)
    try:
        processes.wait_ready(service, lambda: ready(settings), WAIT_S)
        yield settings, service
    finally:
        processes.stop(service, timeout_s=30.0)


SENT_URI = "/shop/item"  # the tests' requests; nginx's readiness check asks for another


def _get(port: int, uri: str = SENT_URI) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", uri, headers={"X-Sent": f"{time.time():.6f}"})
        return connection.getresponse().status
    finally:
        connection.close()


def _send(port: int, count: int, rate_eps: float) -> None:
    start = time.monotonic()
    for i in range(count):
        pause = start + i / rate_eps - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        assert _get(port) == 204


def _spark_agent(settings: JobSettings, tmp_path: Path) -> ServedAgent:
    """A node agent holding the session's job (kind spark-query), served for real."""
    return ServedAgent(AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "port": free_ports(1)[0], "health_timeout_s": WAIT_S, "settle_s": 0,
        "components": [{"kind": "spark-query", "name": "spark", "properties": str(settings.properties_path),
                        "url": settings.url}]}))


def _in_table(settings: JobSettings, ids: list[str]) -> Ledger:
    """The table's ledger once it holds every one of `ids`."""
    # a ledger is a query over the whole table, competing with the job's batches for the same two cores: seldom
    return _polled(lambda: ledger(settings), lambda table: all(rid in table.counts for rid in ids), WAIT_S,
                   f"all {len(ids)} requests in the table", every_s=3.0)


def _log_end(testbed: PipelineSpec) -> tuple[Path, int]:
    """nginx's log and where it ends now: the requests sent from here on are logged after it."""
    log = testbed.log_path()
    return log, log.stat().st_size if log.exists() else 0


def _each_once(settings: JobSettings, log: Path, start: int, sent: int) -> LedgerCheck:
    """The `sent` requests nginx logged after byte `start` of `log`, each in the table exactly once."""
    ids = _request_ids(log, start, sent)
    check = _in_table(settings, ids).check(ids)
    assert check.logged == sent > 100
    assert check.missing == [] and check.duplicated == {}
    return check


def _warehouse_counts(settings: JobSettings) -> dict[str, float]:
    """The `warehouse` stage's histogram count, by node."""
    counts = {}
    for family in text_string_to_metric_families(metrics_text(settings)):
        for sample in family.samples:
            if sample.name == "pipetune_e2e_latency_seconds_count" and sample.labels["stage"] == "warehouse":
                counts[sample.labels["node"]] = sample.value
    return counts


def _request_ids(log: Path, start: int, count: int) -> list[str]:
    """The request_ids of the tests' requests nginx logged after byte `start`, once there are `count`: nginx writes a
    line as it finishes a request, after its answer."""
    return _polled(lambda: logged_request_ids(log, start, SENT_URI), lambda ids: len(ids) >= count, 30.0,
                   f"{count} lines in {log}")


@pytest.mark.slow
def test_every_request_nginx_logged_is_in_the_table_exactly_once(testbed, warehouse, nginx):
    settings, _ = warehouse
    log = testbed.log_path()
    start = log.stat().st_size if log.exists() else 0
    before = _warehouse_counts(settings).get(testbed.node_layouts()[0].name, 0.0)
    _send(nginx, 300, rate_eps=100.0)  # three seconds: several micro-batches
    ids = _request_ids(log, start, 300)
    check = _in_table(settings, ids).check(ids)
    assert check.logged == 300
    assert check.missing == [] and check.duplicated == {}
    # every event of theirs has its event time -> commit observed, under the node Filebeat names
    assert _warehouse_counts(settings)[testbed.node_layouts()[0].name] - before >= 300


@pytest.mark.slow
def test_a_job_killed_mid_stream_restarts_from_its_checkpoint_and_the_table_stays_exact(testbed, warehouse, nginx):
    """SIGKILL, no chance to finish a batch: the batch Spark logged but did not commit is re-run with the same
    offsets and replaces its partition."""
    settings, service = warehouse
    log = testbed.log_path()
    start = log.stat().st_size if log.exists() else 0
    _send(nginx, 100, rate_eps=100.0)
    pid = processes.running_pid(service)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    _polled(lambda: processes.running_pid(service), lambda running: running is None, 30.0, "the killed job gone")
    _send(nginx, 100, rate_eps=100.0)  # while no job runs: Kafka keeps them
    processes.start(service)
    processes.wait_ready(service, lambda: ready(settings), WAIT_S)
    ledger(settings)  # a read before the re-run batch replaces its partition: later reads must list the new files
    _send(nginx, 100, rate_eps=100.0)
    ids = _request_ids(log, start, 300)
    check = _in_table(settings, ids).check(ids)
    assert check.logged == 300
    assert check.missing == [] and check.duplicated == {}


def _batches_of_run(settings: JobSettings, run_id: str, seen: dict[int, float]) -> dict[int, float]:
    """`seen` with the job's last batch added when it is of run `run_id` and read rows: batch id -> trigger time."""
    state = progress(settings)
    last = state["last"]
    if last and last["runId"] == run_id and last["numInputRows"] > 0:
        seen[int(last["batchId"])] = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp()
    return seen


@pytest.mark.slow
def test_the_agent_changes_the_trigger_while_requests_flow_and_the_table_stays_exact(testbed, warehouse, nginx,
                                                                                     tmp_path):
    """Through the agent's HTTP service: a trigger out of range is refused naming the key and range, the file
    untouched; a new one is put in force by stopping the query at a batch boundary and restarting it from its
    checkpoint, while nginx takes requests; the batches after that are the new trigger apart, and every request
    is in the table exactly once."""
    settings, _ = warehouse
    agent = _spark_agent(settings, tmp_path)
    log, start = _log_end(testbed)
    try:
        assert progress(settings)["settings"]["trigger_interval_s"] == 1.0
        before = settings.properties_path.read_text()
        with pytest.raises(AgentError) as refused:
            agent.client.put_config("spark", 1, {"spark.trigger.interval": 61.0})
        assert refused.value.status == 422 and refused.value.detail["field"] == "spark.trigger.interval"
        assert "[0, 60] s" in refused.value.detail["message"]
        assert settings.properties_path.read_text() == before
        with SentLoad(nginx, 50.0, SENT_URI) as sender:
            time.sleep(2.0)  # requests in flight through Filebeat and Kafka as the query is stopped
            result = agent.client.put_config("spark", 1, {"spark.trigger.interval": 4.0})
            assert result.status == "applied", result.message
            state = progress(settings)
            assert state["settings"]["trigger_interval_s"] == 4.0 and state["restarts"] >= 1
            assert properties_file.read(settings.properties_path.read_text())["trigger.interval.s"] == "4"
            # Spark starts a run's first batch at once, then at the interval's multiples since the epoch; a loaded
            # machine starts one late (its progress's timestamp: 8.07 s, the next at 12.0 s), never early, so the
            # batches after the first are each in a 4 s slot of their own, where a 1 s trigger puts several in one
            run, seen = state["run_id"], {}
            batches = _polled(lambda: _batches_of_run(settings, run, seen),
                              lambda seen: len(seen) >= 3, WAIT_S, "three batches of the new run", every_s=0.5)
        later = [started for _, started in sorted(batches.items())[1:]]
        slots = [math.floor(started / 4.0) for started in later]
        assert len(slots) >= 2 and len(set(slots)) == len(slots), later
        gaps = [round(b - a, 3) for a, b in zip(later, later[1:])]
        print(f"trigger 1 s -> 4 s through the agent in {result.elapsed_s:.1f} s; batches of the new run "
              f"{[b for b, _ in sorted(batches.items())]}, gaps after its first {gaps} s")
    finally:
        try:
            agent.client.put_config("spark", 2, {"spark.trigger.interval": 1.0})  # the session job as it was
        finally:
            agent.close()
    check = _each_once(settings, log, start, sender.sent)
    print(f"{check.logged} requests while the trigger changed: {len(check.missing)} missing, "
          f"{len(check.duplicated)} duplicated")


@pytest.mark.slow
def test_a_change_spark_refuses_at_start_is_rolled_back_and_the_table_keeps_every_request_once(testbed, warehouse,
                                                                                               nginx, tmp_path):
    """Through the agent, while nginx takes requests: a minimum per trigger above the maximum (each within its range,
    so the agent's check passes) is refused by Spark's Kafka source as the query starts again; the job answers 500
    and runs its previous settings from the checkpoint, the agent writes the previous file back byte for byte and
    stays on its version, and every request is in the table exactly once."""
    from testbed.spark_job import tuned  # pyspark: installed with the session's job
    settings, _ = warehouse
    agent = _spark_agent(settings, tmp_path)
    log, start = _log_end(testbed)
    try:
        before, run = settings.properties_path.read_text(), progress(settings)["run_id"]
        with SentLoad(nginx, 50.0, SENT_URI) as sender:
            time.sleep(2.0)  # requests in flight through Filebeat and Kafka as the query is stopped
            result = agent.client.put_config("spark", 1, {"spark.maxOffsetsPerTrigger": 100,
                                                          "spark.minOffsetsPerTrigger": 500})
            assert result.status == "rolled_back", result.message
            assert "higher than the maxOffsetsPerTrigger" in result.message, result.message
            # the previous values back over the keys the change wrote: a key the file lacked stays, empty, which the
            # job reads as it read its absence (no minimum); every other byte as it was
            after = settings.properties_path.read_text()
            assert after == before + "minOffsetsPerTrigger=\n"
            assert tuned(properties_file.read(after)) == tuned(properties_file.read(before))
            state = progress(settings)
            assert state["active"] and state["run_id"] != run  # started again from the checkpoint, on the old settings
            assert state["settings"]["max_offsets_per_trigger"] == 0
            assert state["settings"]["min_offsets_per_trigger"] == 0
            component = agent.client.component("spark")
            assert component["version"] == 0 and component["params"]["spark.minOffsetsPerTrigger"] == 0
            time.sleep(3.0)  # requests after the rollback too
    finally:
        agent.close()
    check = _each_once(settings, log, start, sender.sent)
    print(f"{check.logged} requests across a change Spark refused and its rollback ({result.elapsed_s:.1f} s): "
          f"{len(check.missing)} missing, {len(check.duplicated)} duplicated")
