"""The Spark sink's own floor: how long the paper pipeline's job takes to commit one micro-batch into its Hive table,
with no Kafka, no Filebeat and nothing else on the cores, so what tuning can reach on that pipeline is known.

With a 0 s trigger an event waits for the batch running when it reached Kafka to end, then for its own batch: its
latency to the table is about U x D + D for a batch of duration D and U uniform in [0, 1], so the P95 is at least
1.95 x D, before the Structured Streaming's own per-batch work (its offset and commit logs) and the hops before
Kafka. The bench commits batches of `--rows` events with the job's own `Sink.write` (testbed/spark_job.py: the
batch persisted, its stamps collected, then `INSERT OVERWRITE` of its partition) in the job's session (its
properties, local[2], the embedded Derby metastore, the driver's JIT as the job runs it), and beside it, in turn,
each step alone: the stamps collected, and the same rows written as plain parquet files (no metastore). Each
batch size's rounds are interleaved, so drift hits every step alike; the first `--warmup` rounds are not counted.

    python -m bench.spark_floor [--rows 1,150,600] [--batches 30] [--warmup 10] [--out docs/evidence/spark-floor]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from agents.kafka import properties_file
from bench.result import RESULT_FILE, BenchResult
from testbed.install import install_spark
from testbed.spark_sink import JobSettings

console = Console()
WAIT_FACTOR = 1.95  # an event's wait for the running batch (U x D, its P95 0.95 D) plus its own batch (D)
STEPS = ("whole commit (Sink.write)", "stamps collected", "plain parquet write")


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def step_rows(rows: int, samples: dict[str, list[float]]) -> list[dict]:
    """A table row per step for batches of `rows` events: its median and P95 seconds, and for the whole commit the
    end-to-end P95 floor it implies at a 0 s trigger (`WAIT_FACTOR` x its median)."""
    return [{"rows": rows, "step": step, "median_s": statistics.median(samples[step]),
             "p95_s": percentile(samples[step], 0.95),
             "e2e_p95_floor_s": WAIT_FACTOR * statistics.median(samples[step]) if step == STEPS[0] else None}
            for step in STEPS]


def measure(rows_per_batch: list[int], batches: int, warmup: int, home: Path) -> dict[int, dict[str, list[float]]]:
    """Seconds of each step per batch size, after `warmup` rounds, in the job's own session."""
    from pyspark.sql import functions as F

    from testbed.spark_job import NGINX_FIELDS, STAMP_COLUMNS, Sink, session, table_ddl

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # as the testbed runs the job: on loopback
    settings = JobSettings("127.0.0.1:9", "unused", home, metrics_port=1024)  # no Kafka is read, nothing served
    props = properties_file.read(settings.properties(install_spark()))
    spark = session(props)
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(table_ddl(settings.table))
    sink = Sink(spark, settings.table)
    schema = ", ".join([f"{name} {sql}" for name, _, sql in NGINX_FIELDS] + [f"{name} {sql}" for name, sql in STAMP_COLUMNS])
    samples = {rows: {step: [] for step in STEPS} for rows in rows_per_batch}
    batch_id = 0
    for round_ in range(warmup + batches):
        for rows in rows_per_batch:
            now = time.time()
            data = [(f"r{batch_id}-{i}", "GET", "/", 204, 0, 0.001, now, now, now, "node-1", 0, i) for i in range(rows)]
            frame = spark.createDataFrame(data, schema)
            started = time.perf_counter()
            sink.write(frame, batch_id)
            whole = time.perf_counter() - started
            frame.persist()
            started = time.perf_counter()
            frame.select("ts_event", "ts_kafka", "node").collect()
            collected = time.perf_counter() - started
            frame.unpersist()
            started = time.perf_counter()
            frame.withColumn("batch_id", F.lit(batch_id)).write.mode("overwrite").parquet(
                str(home / "plain" / f"batch_id={batch_id}"))
            plain = time.perf_counter() - started
            batch_id += 1
            if round_ >= warmup:
                for step, seconds in zip(STEPS, (whole, collected, plain)):
                    samples[rows][step].append(seconds)
        console.print(f"[dim]round {round_ + 1}/{warmup + batches}{' (warm-up)' if round_ < warmup else ''}[/]")
    spark.stop()
    return samples


def table(rows: list[dict]) -> Table:
    shown = Table(title="one micro-batch into the Hive table, alone on the machine", box=box.SIMPLE_HEAD,
                  show_edge=False)
    for col in ("rows", "step", "median s", "P95 s", "e2e P95 floor s"):
        shown.add_column(col, justify="left" if col == "step" else "right")
    for row in rows:
        floor = row["e2e_p95_floor_s"]
        shown.add_row(str(row["rows"]), row["step"], f"{row['median_s']:.3f}", f"{row['p95_s']:.3f}",
                      "-" if floor is None else f"{floor:.2f}")
    return shown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,150,600", help="events a batch, comma-separated (150: 300 ev/s x 0.5 s)")
    parser.add_argument("--batches", type=int, default=30, help="counted rounds of each batch size")
    parser.add_argument("--warmup", type=int, default=10, help="rounds not counted (the JVM warming up)")
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/spark-floor"))
    args = parser.parse_args(argv)
    try:
        rows_per_batch = [int(part) for part in args.rows.split(",")]
    except ValueError:
        parser.error(f"--rows: {args.rows!r} is not a comma-separated list of whole numbers")
    if not all(1 <= rows <= 100_000 for rows in rows_per_batch):
        parser.error(f"--rows: {args.rows}: each allowed 1 to 100000")
    for value, flag, low in ((args.batches, "--batches", 3), (args.warmup, "--warmup", 0)):
        if value < low:
            parser.error(f"{flag}: {value}, allowed {low} or more")
    started = BenchResult.start("bench.spark_floor", argv)
    with tempfile.TemporaryDirectory(prefix="pipetune-spark-floor-") as home:
        samples = measure(rows_per_batch, args.batches, args.warmup, Path(home))
    rows = [row for size in rows_per_batch for row in step_rows(size, samples[size])]
    args.out.mkdir(parents=True, exist_ok=True)
    started.finish({"one micro-batch into the Hive table": rows}, {"samples_s": samples}).write(args.out / RESULT_FILE)
    console.print(table(rows))
    console.print(f"{args.out / RESULT_FILE}")


if __name__ == "__main__":
    main()
