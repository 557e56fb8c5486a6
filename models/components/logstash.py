"""Logstash 7.17: its pipeline's workers and batches, and its kafka output (the Java producer).

Defaults are the logstash.yml reference's; `logstash.pipeline.workers` defaults to the node's cores (2 on the
paper's node). A change reloads the pipeline.
"""

from __future__ import annotations

from models.components.component import Component, Timer
from models.components.kafka import producer
from models.components.param import RELOAD, param

_OUTPUT, _LINGER = producer("logstash.output.kafka.", ("linger_ms", "batch_size", "acks", "compression_type"), 0.0,
                            RELOAD, 1.0)

LOGSTASH = Component(
    name="logstash",
    params=(
        param("logstash.pipeline.workers", "int", 2, 1, 64, cost=RELOAD, help="filter+output worker threads"),
        param("logstash.pipeline.batch.size", "int", 125, 1, 10000, log=True, unit="events", cost=RELOAD,
              help="events a worker takes per batch"),
        param("logstash.pipeline.batch.delay", "float", 50.0, 0.0, 10000.0, unit="ms", cost=RELOAD, step=1.0,
              help="longest wait for a partial batch (logstash.yml takes whole milliseconds)"),
        *_OUTPUT,
    ),
    picks_up=("logstash.pipeline.batch.size",),
    holds=("logstash.pipeline.batch.size", "logstash.pipeline.batch.delay"),
    sends={"kafka.broker": ("logstash.pipeline.batch.size", "logstash.output.kafka.linger_ms")},
    timers=(Timer("logstash.pipeline.batch.delay", batch="logstash.pipeline.batch.size"), _LINGER),
)
