"""testbed/spark_job.py in this process's own Spark session (a real JVM, no Kafka): the sink's table as readers
see it."""

import shutil
import time
from pathlib import Path

import pytest

from testbed.install import install_spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from testbed import spark_job  # pyspark is installed by install_spark, not by the project's requirements
    home = tmp_path_factory.mktemp("spark-job")
    libs = install_spark()
    session = spark_job.session({"master": "local[1]", "metastore.dir": str(home / "metastore"),
                                 "warehouse.dir": str(home / "warehouse"),
                                 "connector.jars": ",".join(str(jar) for jar in sorted(libs.glob("*.jar")))})
    yield session
    session.stop()


def _batch(spark, request_ids: list[str]):
    """A micro-batch as foreachBatch hands it over: a DataFrame of a session cloned from the job's."""
    from testbed.spark_job import NGINX_FIELDS, STAMP_COLUMNS
    schema = ", ".join([f"{name} {sql}" for name, _, sql in NGINX_FIELDS] + [f"{name} {sql}" for name, sql in
                                                                             STAMP_COLUMNS])
    now = time.time()
    rows = [{"request_id": rid, "method": "GET", "uri": "/", "status": 204, "bytes": 0, "rt": 0.0, "ts_event": now,
             "ts_filebeat": now, "ts_kafka": now, "node": "node-1", "kafka_partition": 0, "kafka_offset": offset}
            for offset, rid in enumerate(request_ids)]
    return spark.newSession().createDataFrame(rows, schema=schema)


@pytest.mark.slow
def test_the_ledger_reads_a_partition_a_rerun_batch_replaced_after_an_earlier_read(spark):
    """A batch re-run after a crash overwrites its partition from the batch's own session; the job's session, which
    listed the old files on an earlier read, must read the new ones (it failed with FILE_NOT_EXIST before)."""
    from testbed.spark_job import Sink, table_ddl
    spark.sql(table_ddl("rerun"))
    sink = Sink(spark, "rerun")
    sink.write(_batch(spark, ["a", "b"]), 0)
    assert sink.ledger() == {"rows": 2, "request_ids": {"a": 1, "b": 1}, "kafka_records": {}}
    sink.write(_batch(spark, ["a", "c"]), 0)  # the rerun: same batch id, what the offset log replays
    assert sink.ledger() == {"rows": 2, "request_ids": {"a": 1, "c": 1}, "kafka_records": {}}


@pytest.mark.slow
def test_the_ledger_tells_a_request_resent_in_a_second_record_from_a_record_written_twice(spark):
    """Filebeat's resend is one request_id in two Kafka records; the job's duplicate is two rows of one record."""
    from testbed.spark_job import Sink, table_ddl
    spark.sql(table_ddl("resent"))
    sink = Sink(spark, "resent")
    sink.write(_batch(spark, ["a", "b"]), 0)
    sink.write(_batch(spark, ["c", "a"]), 1)  # "a" again from offset 1: a second record
    assert sink.ledger()["kafka_records"] == {"a": 2}
    sink.write(_batch(spark, ["a"]), 2)  # "a" from offset 0 once more: a row of a record already in the table
    assert sink.ledger() == {"rows": 5, "request_ids": {"a": 3, "b": 1, "c": 1}, "kafka_records": {"a": 2}}


def test_the_file_reads_as_the_micro_batch_settings_and_names_a_key_spark_would_not_take():
    install_spark()  # pyspark, which the job's module imports (cached after the first)
    from testbed.spark_job import tuned
    settings = tuned({"trigger.interval.s": "2", "maxOffsetsPerTrigger": "", "minOffsetsPerTrigger": "500",
                      "maxTriggerDelay": "15s"})
    assert settings == {"trigger_interval_s": 2.0, "max_offsets_per_trigger": 0, "min_offsets_per_trigger": 500,
                        "max_trigger_delay_s": 15.0, "shuffle_partitions": 200}
    assert tuned({})["max_trigger_delay_s"] == 900.0  # Spark's default, 15 minutes
    with pytest.raises(ValueError, match=r"maxTriggerDelay: '1.5s' is not a Spark time string"):
        tuned({"maxTriggerDelay": "1.5s"})
    with pytest.raises(ValueError, match=r"minOffsetsPerTrigger='-1': allowed 0 or more"):
        tuned({"minOffsetsPerTrigger": "-1"})


@pytest.mark.slow
def test_what_a_killed_insert_left_staged_is_not_moved_into_the_table_by_the_next_one(spark):
    """A job killed after its insert's tasks committed, before the insert's job commit: their files wait under the
    table's `_temporary/0`, and the next insert's commit moved them in beside its own (a request in the table twice,
    CI stop 65). The job's sink clears them as it starts."""
    from testbed.spark_job import Sink, table_ddl
    spark.sql(table_ddl("killed"))
    Sink(spark, "killed").write(_batch(spark, ["a", "b"]), 0)
    table = spark.sql("DESCRIBE TABLE EXTENDED killed").where("col_name = 'Location'").first()["data_type"]
    table = Path(table.removeprefix("file:"))
    written = next(p for p in (table / "batch_id=0").iterdir() if p.suffix == ".parquet")
    task = table / "_temporary" / "0" / "task_202612020000_0001_m_000000" / "batch_id=1"
    task.mkdir(parents=True)
    shutil.copy(written, task / "part-00000-killed.c000.snappy.parquet")  # batch 1's task output, then the kill
    sink = Sink(spark, "killed")  # the job started again
    sink.write(_batch(spark, ["c", "d"]), 1)  # batch 1 re-run from the offset log
    assert sink.ledger() == {"rows": 4, "request_ids": {"a": 1, "b": 1, "c": 1, "d": 1}, "kafka_records": {}}
