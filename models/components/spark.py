"""The Spark Structured Streaming sink: the paper's Kafka -> Spark -> Hive stage. A change restarts the query."""

from __future__ import annotations

from models.components.component import Component, Timer
from models.components.param import RESTART, param

SPARK_SINK = Component(
    name="spark",
    params=(
        param("spark.trigger.interval", "float", 0.0, 0.0, 60.0, unit="s", cost=RESTART, step=0.001,
              help="micro-batch trigger interval (0: start the next batch as soon as the previous one ends)"),
    ),
    picks_up=("spark.trigger.interval",),
    timers=(Timer("spark.trigger.interval"),),
)
