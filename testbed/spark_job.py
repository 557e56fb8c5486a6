"""The paper pipeline's sink: a Spark Structured Streaming query that reads the pipeline's topic, parses the
nginx JSON events Filebeat shipped, and appends them to a Hive-format table (`python -m testbed.spark_job
JOB_PROPERTIES`, or the same file through `spark-submit` on an operator's cluster).

Everything it needs is in its own properties file (`testbed.spark_sink.JobSettings` writes it): the master URL,
the topic, the processing-time trigger, the per-batch limits, `spark.*` settings passed to the session as they
are, and where the warehouse, the embedded Derby metastore and the checkpoint live.

Each micro-batch is written with `INSERT OVERWRITE ... PARTITION (batch_id=N)`: Spark re-runs a batch whose
commit it did not record with the same offsets (its offset log), and the rerun replaces the partition instead of
adding its rows again, so each record is in the table exactly once across restarts. What a killed insert's tasks
left staged in the table's `_temporary` is deleted as the job starts (`Sink.clear_killed_insert`).

Latency to the warehouse: once a batch's insert returns (its partition is in the metastore: readers see it),
each event's write time → that moment is observed as the probe's histogram (`pipetune_e2e_latency_seconds`,
agents/probe/metrics.py) under stage `warehouse`, with the hops `spark_batch_start` (Kafka's append → the batch
starts) and `warehouse_commit` (the batch starts → committed), and both as one span, `kafka_commit` (the sink stage
the learner models); the probe's own stages cover the hops before Kafka. They are served with the query's progress
and a ledger of the table on `metrics.port`: `/metrics` (Prometheus), `/progress` (the query's `lastProgress`, with the micro-batch settings in force and the run they
started), `/ledger` (every request_id in the table with its count, and for one there more than once, how many
Kafka records it came from).

Its micro-batch settings (`trigger.interval.s`, `maxOffsetsPerTrigger`, `minOffsetsPerTrigger`, `maxTriggerDelay`,
`spark.sql.shuffle.partitions`: what the agent tunes, agents/spark.py) are read again from the file on
`POST /reload`: the query is stopped at a batch boundary and started again from its checkpoint with them, in the same session (no new JVM). Spark keeps the
checkpoint's shuffle partitions for the query's own stateful shuffles (this one has none); the batches' inserts run
with the file's.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from agents.kafka import properties_file
from agents.probe.metrics import EVENT_TIME, LatencyHistograms
from agents.spark import spark_seconds

log = logging.getLogger("pipetune.spark_job")

WAREHOUSE, BATCH_START, COMMIT = "warehouse", "spark_batch_start", "warehouse_commit"  # the stages
# Kafka's append -> committed, the two hops above as one span: the sink stage the twin and the learner model (the
# paper topology's `kafka->sink`, which the trigger moves; controller/live.py names it so)
KAFKA_COMMIT = "kafka_commit"
SHUFFLE = "spark.sql.shuffle.partitions"
# Filebeat's Kafka output: the line in `message`, its read time, the node.
ENVELOPE = StructType([StructField("message", StringType()), StructField("@timestamp", StringType()),
                       StructField("host", StructType([StructField("name", StringType())])),
                       StructField("agent", StructType([StructField("name", StringType())]))])
NGINX_FIELDS = (("request_id", StringType(), "STRING"), ("method", StringType(), "STRING"),
                ("uri", StringType(), "STRING"), ("status", LongType(), "BIGINT"), ("bytes", LongType(), "BIGINT"),
                ("rt", DoubleType(), "DOUBLE"))
# The table's columns after the nginx fields (times in epoch seconds; the source's Kafka coordinates).
STAMP_COLUMNS = (("ts_event", "DOUBLE"), ("ts_filebeat", "DOUBLE"), ("ts_kafka", "DOUBLE"), ("node", "STRING"),
                 ("kafka_partition", "INT"), ("kafka_offset", "BIGINT"))


def table_ddl(table: str) -> str:
    """The Hive-format table, one partition per micro-batch (what makes a batch's rerun replace, not add)."""
    columns = [f"{name} {sql}" for name, _, sql in NGINX_FIELDS] + [f"{name} {sql}" for name, sql in STAMP_COLUMNS]
    return (f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(columns)}) PARTITIONED BY (batch_id BIGINT) "
            "STORED AS PARQUET")


def session(props: dict[str, str]) -> SparkSession:
    """The job's session: Hive catalog on an embedded Derby metastore under the run dir, the connector's jars."""
    metastore = props["metastore.dir"]
    builder = (SparkSession.builder.appName(props.get("app.name", "pipetune-warehouse")).master(props["master"])
               .config("spark.sql.catalogImplementation", "hive")
               .config("spark.sql.warehouse.dir", props["warehouse.dir"])
               .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                       f"jdbc:derby:;databaseName={metastore}/metastore_db;create=true")
               .config("spark.hadoop.hive.exec.scratchdir", f"{metastore}/scratch")
               .config("spark.jars", props["connector.jars"]))
    java_options = f"-Dderby.system.home={metastore} {props.get('spark.driver.extraJavaOptions', '')}".strip()
    for key, value in (props | {"spark.driver.extraJavaOptions": java_options}).items():
        if key.startswith("spark."):
            builder = builder.config(key, value)
    return builder.enableHiveSupport().getOrCreate()


def events(spark: SparkSession, props: dict[str, str]) -> DataFrame:
    """The topic's records as table rows: the nginx fields, the event and hop times, the node."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", props["bootstrap"])
              .option("subscribe", props["topic"]).option("startingOffsets", props.get("starting.offsets", "earliest"))
              .option("failOnDataLoss", "true"))
    settings = tuned(props)
    for key, name in (("maxOffsetsPerTrigger", "max_offsets_per_trigger"),
                      ("minOffsetsPerTrigger", "min_offsets_per_trigger")):
        if settings[name]:  # 0 (or the key empty): Spark's own default, no limit
            reader = reader.option(key, str(settings[name]))
    if settings["min_offsets_per_trigger"]:  # the delay acts only with a minimum; in whole ms, as Spark reads it
        reader = reader.option("maxTriggerDelay", f"{round(settings['max_trigger_delay_s'] * 1000)}ms")
    time_field = props.get("event.time.field", "ts_nginx")
    line_schema = StructType([StructField(name, kind) for name, kind, _ in NGINX_FIELDS]
                             + [StructField(time_field, DoubleType())])
    envelope = F.from_json(F.col("value").cast("string"), ENVELOPE)
    raw = reader.load().select(envelope.alias("e"), "timestamp", "partition", "offset")
    line = F.from_json(F.col("e.message"), line_schema)
    parsed = raw.select(line.alias("l"), "e", "timestamp", "partition", "offset")
    return parsed.select(*(F.col(f"l.{name}").alias(name) for name, _, _ in NGINX_FIELDS),
                         F.col(f"l.{time_field}").alias("ts_event"),
                         (F.unix_micros(F.to_timestamp(F.col("e.`@timestamp`"))) / 1e6).alias("ts_filebeat"),
                         (F.unix_micros(F.col("timestamp")) / 1e6).alias("ts_kafka"),
                         F.coalesce(F.col("e.host.name"), F.col("e.agent.name"), F.lit("")).alias("node"),
                         F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"))


class Sink:
    """Writes each micro-batch into its own partition and observes each event's latency once it is committed."""

    def __init__(self, spark: SparkSession, table: str) -> None:
        self.spark, self.table = spark, table
        # a batch's INSERT OVERWRITE replaces a partition's files under a read of the table: reads wait for it
        self.table_lock = threading.Lock()
        self.shuffle_partitions = int(spark.conf.get(SHUFFLE) or 200)
        self.registry = CollectorRegistry()
        self.latency = LatencyHistograms()
        self.registry.register(self.latency)
        self.rows = Counter("pipetune_warehouse_rows", "Rows committed to the table", registry=self.registry)
        self.batches = Counter("pipetune_warehouse_batches", "Micro-batches committed", registry=self.registry)
        self.last_batch = Gauge("pipetune_warehouse_last_batch_id", "The last batch committed", registry=self.registry)
        self.batch_seconds = Gauge("pipetune_warehouse_batch_seconds", "The last batch's start to its commit",
                                   registry=self.registry)
        self.clear_killed_insert()

    def clear_killed_insert(self) -> None:
        """Delete what an insert killed before its job commit left in the table's `_temporary`: its tasks' committed
        output waits there, and the next insert's job commit moves everything under it into the table, the killed
        batch's rows beside its rerun's (SPARK-29037; a static partition's overwrite stages there, not per job). The
        job is the table's only writer, and this runs before its query starts."""
        described = self.spark.sql(f"DESCRIBE TABLE EXTENDED {self.table}").where("col_name = 'Location'").first()
        jvm, hadoop_conf = self.spark.sparkContext._jvm, self.spark.sparkContext._jsc.hadoopConfiguration()
        staged = jvm.org.apache.hadoop.fs.Path(described["data_type"].rstrip("/") + "/_temporary")
        fs = staged.getFileSystem(hadoop_conf)
        if fs.exists(staged):
            fs.delete(staged, True)
            log.warning("deleted %s: an insert killed before its commit left it", staged)

    def write(self, batch: DataFrame, batch_id: int) -> None:
        started = time.time()
        # the batch's session is a clone holding the checkpoint's conf: the file's shuffle partitions, set here
        batch.sparkSession.conf.set(SHUFFLE, str(self.shuffle_partitions))
        batch.persist()
        try:
            stamps = batch.select("ts_event", "ts_kafka", "node").collect()
            if not stamps:
                return
            view = f"pipetune_batch_{batch_id}"
            batch.createOrReplaceTempView(view)
            columns = ", ".join([name for name, _, _ in NGINX_FIELDS] + [name for name, _ in STAMP_COLUMNS])
            # the batch's own session: foreachBatch hands each batch a session of its own, its views unseen elsewhere
            with self.table_lock:
                batch.sparkSession.sql(f"INSERT OVERWRITE TABLE {self.table} PARTITION (batch_id={int(batch_id)}) "
                                       f"SELECT {columns} FROM {view}")
            committed = time.time()
            batch.sparkSession.catalog.dropTempView(view)
        finally:
            batch.unpersist()
        for ts_event, ts_kafka, node in stamps:
            hops = {BATCH_START: started - ts_kafka, KAFKA_COMMIT: committed - ts_kafka} if ts_kafka else {}
            if ts_event is not None:
                hops[WAREHOUSE] = committed - ts_event
            hops[COMMIT] = committed - started
            self.latency.observe(hops, EVENT_TIME, node or "")
        self.rows.inc(len(stamps))
        self.batches.inc()
        self.last_batch.set(batch_id)
        self.batch_seconds.set(committed - started)
        log.info("batch %d: %d rows committed in %.3f s", batch_id, len(stamps), committed - started)

    def ledger(self) -> dict:
        """Every request_id in the table with its count, the table's row count, and for each request_id there more than
        once the Kafka records (partition, offset) its rows came from: two records are the shipper's resend, two rows
        of one record the job's duplicate."""
        with self.table_lock:
            # the batch's session overwrote partitions; this session's listing of their files is stale until refreshed
            self.spark.catalog.refreshTable(self.table)
            rows = self.spark.sql(f"SELECT request_id, count(*) AS n, count(DISTINCT kafka_partition, kafka_offset) "
                                  f"AS k FROM {self.table} GROUP BY request_id").collect()
        ids = {row["request_id"]: row["n"] for row in rows if row["request_id"] is not None}
        records = {row["request_id"]: row["k"] for row in rows if row["request_id"] is not None and row["n"] > 1}
        return {"rows": sum(row["n"] for row in rows), "request_ids": ids, "kafka_records": records}


def serve(sink: Sink, query_progress, host: str, port: int, reload=None) -> ThreadingHTTPServer:
    """`/metrics`, `/progress` and `/ledger` on host:port, on a thread of its own; `POST /reload` calls `reload()`
    (-> HTTP status, JSON document) when given."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/reload" or reload is None:
                self.send_error(404)
                return
            status, doc = reload()
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                if self.path == "/metrics":
                    body, kind = generate_latest(sink.registry), "text/plain; version=0.0.4"
                elif self.path == "/progress":
                    body, kind = json.dumps(query_progress()).encode(), "application/json"
                elif self.path == "/ledger":
                    body, kind = json.dumps(sink.ledger()).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
            except Exception as err:  # a query the table cannot answer yet: say so, do not die
                self.send_error(503, str(err)[:200])
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="spark-job-http").start()
    return server


def tuned(props: dict[str, str]) -> dict[str, float | int]:
    """The micro-batch settings a properties file gives (agents/spark.py tunes them); `ValueError` naming the key."""
    def number(key: str, kind, default: str):
        text = props.get(key, "").strip() or default
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{key}={text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value < 0:
            raise ValueError(f"{key}={text!r}: allowed 0 or more")
        return value
    partitions = number(SHUFFLE, int, "200")
    if partitions < 1:
        raise ValueError(f"{SHUFFLE}={partitions}: allowed 1 or more")
    try:
        delay_s = spark_seconds(props.get("maxTriggerDelay", ""))
    except ValueError as err:
        raise ValueError(f"maxTriggerDelay: {err}") from None
    if delay_s < 0:
        raise ValueError(f"maxTriggerDelay={props['maxTriggerDelay']!r}: allowed 0 or more")
    return {"trigger_interval_s": number("trigger.interval.s", float, "0"),
            "max_offsets_per_trigger": number("maxOffsetsPerTrigger", int, "0"),
            "min_offsets_per_trigger": number("minOffsetsPerTrigger", int, "0"), "max_trigger_delay_s": delay_s,
            "shuffle_partitions": partitions}


class Job:
    """The running query, stopped at a batch boundary and started again from its checkpoint on a reload."""

    def __init__(self, spark: SparkSession, sink: Sink, path: Path, props: dict[str, str]) -> None:
        self.spark, self.sink, self.path, self.props = spark, sink, path, props
        self.lock = threading.Lock()
        self.restarting = False
        self.restarts = 0
        self.settings = tuned(props)
        self.query = self._start()

    def _start(self):
        self.spark.conf.set(SHUFFLE, str(self.settings["shuffle_partitions"]))
        self.sink.shuffle_partitions = int(self.settings["shuffle_partitions"])
        self.started_at = time.time()
        return (events(self.spark, self.props).writeStream.foreachBatch(self.sink.write)
                .trigger(processingTime=f"{float(self.settings['trigger_interval_s'])} seconds")
                .option("checkpointLocation", self.props["checkpoint.dir"]).queryName("pipetune_warehouse").start())

    def active(self) -> bool:
        return self.restarting or self.query.isActive

    def state(self) -> dict:
        query = self.query
        last = query.lastProgress
        return {"active": self.active(), "status": query.status, "last": json.loads(last.json) if last else None,
                "settings": self.settings, "run_id": str(query.runId), "started_at": self.started_at,
                "restarts": self.restarts}

    def stop_at_boundary(self, timeout_s: float = 30.0) -> None:
        """Stop the query once no batch runs (bounded: a batch stopped half-way is re-run from the offset log and
        replaces its partition, so waiting only saves work)."""
        deadline = time.monotonic() + timeout_s
        while self.query.isActive and self.query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.query.stop()

    def reload(self) -> tuple[int, dict]:
        """Read the file again; restart the query on its settings: 200 with them, 422 for a file that does not
        read (the query untouched), 500 when the query could not be started again."""
        try:
            props = properties_file.read(self.path.read_text())
            settings = tuned(props)
        except (OSError, ValueError) as err:
            return 422, {"error": str(err)}
        with self.lock:
            self.restarting = True
            try:
                previous, previous_props = self.settings, self.props
                self.stop_at_boundary()
                self.props, self.settings = props, settings
                try:
                    self.query = self._start()
                except Exception as err:  # noqa: BLE001 (Spark's errors are many): answered, the previous run back
                    log.error("query not restarted on %s, back on %s: %s", settings, previous, err)
                    self.props, self.settings = previous_props, previous
                    self.query = self._start()
                    return 500, {"error": f"{type(err).__name__}: {err}"[:2000], "settings": previous}
                self.restarts += 1
                log.info("query restarted from its checkpoint: %s (was %s)", settings, previous)
                return 200, {"settings": settings, "run_id": str(self.query.runId)}
            finally:
                self.restarting = False


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    props = properties_file.read(Path(argv[0]).read_text())
    spark = session(props)
    spark.sparkContext.setLogLevel(props.get("log.level", "WARN"))
    table = props.get("table", "nginx_access")
    spark.sql(table_ddl(table))
    sink = Sink(spark, table)
    path = Path(argv[0])
    job = Job(spark, sink, path, props)
    server = serve(sink, job.state, props.get("metrics.host", "127.0.0.1"), int(props["metrics.port"]), job.reload)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    log.info("query %s started: %s -> table %s", job.query.id, props["topic"], table)
    while job.active() and not stopping.is_set():
        stopping.wait(0.5)
    with job.lock:  # a reload under way ends first
        query = job.query
    if query.exception() is not None:
        log.error("query failed: %s", query.exception())
    # At a batch boundary where it can: a batch stopped half-way is re-run from the offset log and replaces its
    # partition, so this only saves work, it is not what keeps the table exact.
    failed = query.exception() is not None and not stopping.is_set()
    server.shutdown()
    try:
        job.stop_at_boundary()
        spark.stop()
    except Exception as err:  # the JVM is in this process group: a group's SIGTERM may have stopped it already
        log.info("the JVM was gone before the query stopped: %s", type(err).__name__)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
