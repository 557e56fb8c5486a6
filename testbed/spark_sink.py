"""The paper pipeline's Spark sink on the testbed: the Structured Streaming job (testbed/spark_job.py) that reads the
pipeline's topic into a Hive-format table, as a process of its own, its settings in its own properties file.

pyspark and Spark's Kafka connector are installed on first use (`testbed.install.install_spark`); nothing here
imports pyspark, so the main command never needs it. The job runs under `master` (`local[N]` on one node; an
operator's `spark://` or YARN master works the same way). Its warehouse, its embedded Derby metastore and its
checkpoint are under the job's directory. It serves `/metrics` (the `warehouse` stage's latency histograms),
`/progress` and `/ledger` on `metrics_port`; `ledger_check` says whether every request nginx logged is in the table
exactly once.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from agents.kafka import properties_file
from testbed.install import install_spark
from testbed.pipeline import SPARK_MASTER, SPARK_TABLE, PipelineSpec
from testbed.probe import checkout_env
from testbed.processes import Service

JOB_MODULE = "testbed.spark_job"
PROPERTIES = "spark-job.properties"
MASTER = re.compile(SPARK_MASTER)
TABLE = re.compile(SPARK_TABLE)


@dataclass(frozen=True)
class JobSettings:
    """What the job reads, where it writes, and its micro-batch settings (the ones the agent will tune)."""

    bootstrap: str
    topic: str
    home: Path  # the job's directory: its properties, warehouse, metastore, checkpoint
    metrics_port: int
    master: str = "local[2]"
    trigger_interval_s: float = 1.0
    max_offsets_per_trigger: int | None = None
    shuffle_partitions: int = 2
    starting_offsets: str = "earliest"  # or "latest", or Kafka's JSON of offsets per partition
    table: str = "nginx_access"
    event_time_field: str = "ts_nginx"
    driver_memory_mb: int = 1024
    # The JIT's first tier only: on two shared cores its second tier's compiling competes with the job itself
    # (measured here, 150 events a round: ready 18 s against 23-28 s, the first batch 6.7 s against 10, then
    # 1.3-1.7 s against 1.8-2.9 s to the table).
    driver_java_options: str = "-XX:TieredStopAtLevel=1"
    spark_conf: dict[str, str] = field(default_factory=dict)  # further `spark.*` settings, as they are

    def __post_init__(self) -> None:
        if not MASTER.match(self.master):
            raise ValueError(f"master: {self.master!r} is not a Spark master URL; allowed local, local[N], "
                             "local[*], spark://HOST:PORT, yarn, k8s://...")
        if not 0.05 <= self.trigger_interval_s <= 3600:
            raise ValueError(f"trigger_interval_s: {self.trigger_interval_s}, allowed 0.05 to 3600")
        if self.max_offsets_per_trigger is not None and not 1 <= self.max_offsets_per_trigger <= 10**9:
            raise ValueError(f"max_offsets_per_trigger: {self.max_offsets_per_trigger}, allowed 1 to 1e9 or none")
        if not 1 <= self.shuffle_partitions <= 10_000:
            raise ValueError(f"shuffle_partitions: {self.shuffle_partitions}, allowed 1 to 10000")
        if not 1024 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port: {self.metrics_port}, allowed 1024 to 65535")
        if not TABLE.match(self.table):
            raise ValueError(f"table: {self.table!r}, allowed letters, digits and _ (not first), up to 128")
        if not 256 <= self.driver_memory_mb <= 65536:
            raise ValueError(f"driver_memory_mb: {self.driver_memory_mb}, allowed 256 to 65536")
        bad = [key for key in self.spark_conf if not key.startswith("spark.")]
        if bad:
            raise ValueError(f"spark_conf: {', '.join(bad)} do not start with 'spark.'")

    @property
    def properties_path(self) -> Path:
        return self.home / PROPERTIES

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def properties(self, connector_libs: Path) -> str:
        """The job's properties file."""
        lines = {
            "master": self.master, "bootstrap": self.bootstrap, "topic": self.topic,
            "starting.offsets": self.starting_offsets, "table": self.table,
            "event.time.field": self.event_time_field, "trigger.interval.s": repr(self.trigger_interval_s),
            "maxOffsetsPerTrigger": "" if self.max_offsets_per_trigger is None else str(self.max_offsets_per_trigger),
            "warehouse.dir": str(self.home / "warehouse"), "metastore.dir": str(self.home / "metastore"),
            "checkpoint.dir": str(self.home / "checkpoint"), "metrics.host": "127.0.0.1",
            "metrics.port": str(self.metrics_port),
            "connector.jars": ",".join(str(jar) for jar in sorted(connector_libs.glob("*.jar"))),
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.driver.memory": f"{self.driver_memory_mb}m", "spark.driver.extraJavaOptions": self.driver_java_options,
            # The job's own endpoints are all it serves: no web UI, and the driver on loopback.
            "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        } | self.spark_conf
        return properties_file.patch("# pipetune's Spark sink (testbed/spark_job.py)\n", lines)


def job_settings(spec: PipelineSpec) -> JobSettings:
    """The job of a pipeline with a Spark sink (`spark:`), on the probe's topic from its start, under `<run>/spark`."""
    if spec.spark is None:
        raise ValueError(f"spark: the pipeline {spec.name!r} has no Spark sink")
    job = spec.spark
    return JobSettings(spec.bootstrap, spec.probe.topic, spec.resolved_run_dir() / "spark", job.metrics_port,
                       master=job.master, trigger_interval_s=job.trigger_interval_s,
                       max_offsets_per_trigger=job.max_offsets_per_trigger, shuffle_partitions=job.shuffle_partitions,
                       table=job.table, driver_memory_mb=job.driver_memory_mb)


def spark_service(settings: JobSettings, run_dir: Path, name: str = "spark") -> Service:
    """The job as a process (pyspark and the connector installed first), its properties written; its log is
    `<run_dir>/logs/<name>.out`."""
    libs = install_spark()
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.properties_path.write_text(settings.properties(libs))
    # as a module: run as a script, testbed/ would come first on its path and its kafka.py hide kafka-python
    argv = (sys.executable, "-m", JOB_MODULE, str(settings.properties_path))
    # Spark binds to the address the host name resolves to unless told: the testbed stays on loopback.
    return Service(name, argv, run_dir, env=checkout_env() | {"SPARK_LOCAL_IP": "127.0.0.1"})


def _get(settings: JobSettings, path: str, timeout_s: float = 10.0) -> bytes:
    with urllib.request.urlopen(settings.url + path, timeout=timeout_s) as response:
        return response.read()


def progress(settings: JobSettings) -> dict:
    """The query's state: `active`, `status` and `last` (its `lastProgress`, None before a first batch)."""
    return json.loads(_get(settings, "/progress"))


def ready(settings: JobSettings) -> bool:
    """Whether the query runs (its first trigger may still be to come)."""
    return bool(progress(settings)["active"])


def metrics_text(settings: JobSettings) -> str:
    """What Prometheus scrapes from the job."""
    return _get(settings, "/metrics").decode()


@dataclass(frozen=True)
class Ledger:
    """The table by request_id: how many rows it holds, each request_id's count, and for one there more than once the
    Kafka records its rows came from (none listed: one record each)."""

    rows: int
    counts: dict[str, int]
    kafka_records: dict[str, int] = field(default_factory=dict)

    def check(self, logged: list[str]) -> "LedgerCheck":
        """Every request_id of `logged` (nginx's) against the table: missing, written more than once by the job
        (rows beyond its Kafka records), in Kafka more than once (the shipper resent it: at-least-once)."""
        missing = sorted({rid for rid in logged if rid not in self.counts})
        records = {rid: self.kafka_records.get(rid, 1) for rid in set(logged) if self.counts.get(rid, 0) > 1}
        duplicated = {rid: self.counts[rid] - k + 1 for rid, k in records.items() if self.counts[rid] > k}
        resent = {rid: k for rid, k in records.items() if k > 1}
        return LedgerCheck(len(set(logged)), missing, duplicated, resent)


@dataclass(frozen=True)
class LedgerCheck:
    """Requests nginx logged that the table misses, holds more than once of one Kafka record (`duplicated`: the
    job's; rows of each, counted as one per record), or holds from more than one Kafka record (`resent`: records of
    each; the shipper's at-least-once, not the job's)."""

    logged: int
    missing: list[str]
    duplicated: dict[str, int]
    resent: dict[str, int] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return not self.missing and not self.duplicated


def ledger(settings: JobSettings, timeout_s: float = 60.0) -> Ledger:
    """The table's ledger, read through the job's own session (the embedded metastore admits one JVM)."""
    doc = json.loads(_get(settings, "/ledger", timeout_s=timeout_s))
    return Ledger(int(doc["rows"]), {str(k): int(v) for k, v in doc["request_ids"].items()},
                  {str(k): int(v) for k, v in doc.get("kafka_records", {}).items()})


def logged_request_ids(log_path: Path, from_byte: int = 0, uri: str | None = None) -> list[str]:
    """The request_ids of the JSON lines of an access log from byte `from_byte` on, of requests for `uri` only when
    given (lines without a request_id, or not JSON, are skipped)."""
    with open(log_path, "rb") as log:
        log.seek(from_byte)
        text = log.read().decode(errors="replace")
    ids = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("request_id"), str) and uri in (None, doc.get("uri")):
            ids.append(doc["request_id"])
    return ids
