"""The Spark Structured Streaming sink: the paper's Kafka -> Spark -> Hive stage. A change stops the query at a batch
boundary and restarts it from its checkpoint (agents/spark.py).

Only the trigger moves a latency stage the twin models, so it alone is tuned by default. The twin also takes at most
`maxOffsetsPerTrigger` records a batch: a limit never makes a batch faster, but one too low for the load falls behind,
and a twin screen says so. The per-trigger minimum, the trigger delay and the shuffle partitions are the job's other
micro-batch settings the agent applies (declared here once, with their ranges, like every parameter).
`minOffsetsPerTrigger` and `maxTriggerDelay` are the Kafka source's options since Spark 3.3: a trigger that finds fewer
new records than the minimum skips its batch, until `maxTriggerDelay` has passed since the last one.
"""

from __future__ import annotations

from models.components.component import Component, Timer
from models.components.param import RESTART, param

MAX_OFFSETS_NO_LIMIT = 10_000_000  # spark.maxOffsetsPerTrigger at the top of its range: Spark's default, no limit

SPARK_SINK = Component(
    name="spark",
    params=(
        param("spark.trigger.interval", "float", 0.0, 0.0, 60.0, unit="s", cost=RESTART, step=0.001,
              help="micro-batch trigger interval (0: start the next batch as soon as the previous one ends)"),
        # Spark's reader option of that name; its default is no limit, a batch takes every offset there is. No limit is
        # the top of the range (the job's file leaves the key empty), so the search's smallest step from it is a
        # loose limit: as 0, the first step from it was the tightest (488 records a batch, the job fell behind).
        param("spark.maxOffsetsPerTrigger", "int", MAX_OFFSETS_NO_LIMIT, 1, MAX_OFFSETS_NO_LIMIT, log=True,
              unit="records", cost=RESTART,
              help=f"most Kafka records one micro-batch reads ({MAX_OFFSETS_NO_LIMIT:,}, the top: no limit)"),
        # Spark's reader option of that name (no default: no minimum); only with it does maxTriggerDelay act. Spark
        # refuses a query whose minimum is above its maxOffsetsPerTrigger when it starts: the agent rolls that back.
        param("spark.minOffsetsPerTrigger", "int", 0, 0, 10_000_000, unit="records", cost=RESTART,
              help="fewest new Kafka records a micro-batch waits for, at most maxTriggerDelay (0: no minimum)"),
        # Spark's reader option of that name, a time string in its file ("15m" its default; the agent writes ms).
        param("spark.maxTriggerDelay", "float", 900.0, 0.0, 3600.0, unit="s", cost=RESTART, step=0.001,
              help="longest a micro-batch waits for minOffsetsPerTrigger records after the last one"),
        param("spark.sql.shuffle.partitions", "int", 200, 1, 1000, cost=RESTART,
              help="partitions of a shuffle in the job's queries (Spark's default 200)"),
    ),
    picks_up=("spark.trigger.interval",),
    # maxTriggerDelay is a wait only a minimum fills sooner: a lull's batches sit it out in full (its ceiling)
    timers=(Timer("spark.trigger.interval"), Timer("spark.maxTriggerDelay", batch="spark.minOffsetsPerTrigger")),
)
