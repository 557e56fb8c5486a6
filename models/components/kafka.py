"""Kafka 3.x: the broker's dynamic configs, the consumer that is the sink where no Spark job reads, a producer the
node runs, and the settings every Kafka producer shares (Logstash's kafka output is one).

Defaults are Kafka 3.7's broker and consumer configs; the node's producer's are the replay sink's own.
"""

from __future__ import annotations

from models.components.component import Component, Timer
from models.components.param import LIVE, RESTART, ChangeCost, Param, param


def producer(prefix: str, names: tuple[str, str, str, str], linger_ms: float, cost: ChangeCost,
             linger_step_ms: float | None) -> tuple[tuple[Param, ...], Timer]:
    """A Kafka producer's linger, batch size, acks and compression, named as its configuration names them, and its
    wait: the linger, ended once a batch's bytes are there. Acks 1, 16384-byte batches and no compression by
    default. `linger_step_ms`: 1.0 for the Java client (linger.ms is a long), None for librdkafka (a double)."""
    linger, batch, acks, compression = (prefix + name for name in names)
    params = (
        param(linger, "float", linger_ms, 0.0, 10000.0, unit="ms", cost=cost, step=linger_step_ms,
              help="producer wait for more records before a send"),
        param(batch, "int", 16384, 1, 16777216, log=True, unit="bytes", cost=cost,
              help="producer batch size per partition"),
        param(acks, "categorical", "1", cost=cost, choices=("0", "1", "all"),
              help="acknowledgements the producer waits for"),
        param(compression, "categorical", "none", cost=cost, choices=("none", "gzip", "snappy", "lz4", "zstd"),
              help="producer compression"),
    )
    return params, Timer(linger, batch=batch)


KAFKA_BROKER = Component(
    name="kafka.broker",
    params=(
        param("kafka.broker.num.io.threads", "int", 8, 1, 64, cost=LIVE, help="broker request-handler threads"),
        param("kafka.broker.num.network.threads", "int", 3, 1, 32, cost=LIVE, help="broker network threads"),
    ),
)

KAFKA_CONSUMER = Component(
    name="kafka.consumer",
    params=(
        param("kafka.consumer.fetch.min.bytes", "int", 1, 1, 10485760, log=True, unit="bytes", cost=RESTART,
              help="bytes the broker waits for before answering a fetch"),
        param("kafka.consumer.fetch.max.wait.ms", "float", 500.0, 0.0, 10000.0, unit="ms", cost=RESTART, step=1.0,
              help="longest the broker holds a fetch waiting for fetch.min.bytes (an int)"),
    ),
    picks_up=("kafka.consumer.fetch.max.wait.ms",),
    timers=(Timer("kafka.consumer.fetch.max.wait.ms", batch="kafka.consumer.fetch.min.bytes"),),
)

# The replay engine's Kafka sink (librdkafka). Its settings are fixed once it is created, so a change recreates it.
# Defaults: what the replay sink sent with under kafka-python (linger 5 ms, which is librdkafka's default too).
_PARAMS, _LINGER = producer("kafka.producer.", ("linger.ms", "batch.size", "acks", "compression.type"), 5.0, RESTART,
                            None)
KAFKA_PRODUCER = Component(name="kafka.producer", params=_PARAMS, timers=(_LINGER,))
