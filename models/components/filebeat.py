"""Filebeat 7.17 with the `log` input: the harvester that reads the log, its memory queue and its output.

Defaults are the Filebeat 7.17 reference's. The `log` input's names are canonical; the Filebeat adapter maps them
onto `filestream` names (scan_frequency -> prospector.scanner.check_interval, backoff -> backoff.init,
max_backoff -> backoff.max) when the pipeline uses that input. Its live input reload can drop a line
(bench/reload_loss.py), so every change restarts Filebeat, which resumes from acknowledged offsets.
"""

from __future__ import annotations

from typing import Mapping

from models.components.component import Component, Timer
from models.components.param import Value, param


def _buffered_events(config: Mapping[str, Value], rate_eps: float) -> float:
    """Events `config` holds back at `rate_eps` while keeping up: the flush batch being gathered
    (min(flush.min_events, rate × flush.timeout)) and the output's batches in flight (pipelining batches per
    worker, each at most bulk_max_size and no bigger than a flush batch)."""
    flush_batch = max(1.0, min(float(config["filebeat.queue.mem.flush.min_events"]),
                               rate_eps * float(config["filebeat.queue.mem.flush.timeout"])))
    output_batch = min(float(config["filebeat.output.bulk_max_size"]), flush_batch)
    in_flight_batches = max(int(config["filebeat.output.pipelining"]), 1) * int(config["filebeat.output.worker"])
    return flush_batch + in_flight_batches * output_batch


FILEBEAT = Component(
    name="filebeat",
    params=(
        param("filebeat.scan_frequency", "float", 10.0, 0.001, 60.0, log=True, unit="s",
              help="how often the prospector looks for new files"),
        param("filebeat.backoff", "float", 1.0, 0.001, 10.0, log=True, unit="s",
              help="first wait after a harvester reaches EOF"),
        param("filebeat.max_backoff", "float", 10.0, 0.001, 60.0, log=True, unit="s",
              help="longest wait at EOF; backoff doubles up to it"),
        param("filebeat.backoff_factor", "int", 2, 1, 10, help="growth of the EOF wait"),
        param("filebeat.close_inactive", "float", 300.0, 1.0, 3600.0, log=True, unit="s",
              help="close a file's harvester after this long without new lines"),
        param("filebeat.harvester_buffer_size", "int", 16384, 1024, 1048576, log=True, unit="bytes",
              help="bytes each harvester reads at once"),
        param("filebeat.multiline.timeout", "float", 5.0, 0.001, 60.0, log=True, unit="s",
              help="longest wait for the rest of a multi-line event"),
        param("filebeat.queue.mem.events", "int", 4096, 32, 1048576, log=True, unit="events",
              help="memory queue capacity; a full queue pushes back on the harvesters"),
        param("filebeat.queue.mem.flush.min_events", "int", 2048, 0, 1048576, unit="events",
              help="events to gather before a batch goes to the output (0 or 1: no waiting)"),
        param("filebeat.queue.mem.flush.timeout", "float", 1.0, 0.0, 60.0, unit="s",
              help="longest wait for flush.min_events"),
        param("filebeat.output.bulk_max_size", "int", 2048, 1, 65536, log=True, unit="events",
              help="largest batch per request"),
        param("filebeat.output.pipelining", "int", 2, 0, 16, help="batches in flight per worker (0: synchronous)"),
        param("filebeat.output.worker", "int", 1, 1, 16, help="output workers (connections)"),
    ),
    picks_up=("filebeat.scan_frequency", "filebeat.backoff", "filebeat.max_backoff"),
    holds=("filebeat.queue.mem.flush.min_events", "filebeat.queue.mem.flush.timeout"),
    # output.kafka has no `pipelining`: it shapes only the Logstash output
    sends={"logstash": ("filebeat.output.bulk_max_size", "filebeat.output.pipelining"),
           "kafka.broker": ("filebeat.output.bulk_max_size",)},
    timers=(Timer("filebeat.backoff", grows_to="filebeat.max_backoff"),
            Timer("filebeat.queue.mem.flush.timeout", batch="filebeat.queue.mem.flush.min_events")),
    periodic=("filebeat.scan_frequency",),
    # libbeat/publisher/queue/memqueue/config.go Validate: "flush.min_events must be less events"
    not_above=(("filebeat.queue.mem.flush.min_events", "filebeat.queue.mem.events"),),
    # A requirement of both inputs that Filebeat states but does not check (`filebeat test config` takes any order):
    # backoff <= max_backoff <= scan_frequency (7.17 reference, log input,
    # https://www.elastic.co/guide/en/beats/filebeat/7.17/filebeat-input-log.html#_max_backoff), which filestream
    # states as backoff.init <= backoff.max <= prospector.scanner.check_interval (the same keys, mapped;
    # https://www.elastic.co/guide/en/beats/filebeat/7.17/filebeat-input-filestream.html#_backoff_max).
    unchecked_not_above=(("filebeat.backoff", "filebeat.max_backoff"),
                         ("filebeat.max_backoff", "filebeat.scan_frequency")),
    buffered=_buffered_events,
    # Elastic's output presets (Filebeat reference, "Configure the output preset")
    presets={
        "balanced": {"filebeat.output.bulk_max_size": 1600, "filebeat.output.worker": 1,
                     "filebeat.queue.mem.events": 3200, "filebeat.queue.mem.flush.min_events": 1600,
                     "filebeat.queue.mem.flush.timeout": 10.0},
        "throughput": {"filebeat.output.bulk_max_size": 1600, "filebeat.output.worker": 4,
                       "filebeat.queue.mem.events": 12800, "filebeat.queue.mem.flush.min_events": 1600,
                       "filebeat.queue.mem.flush.timeout": 5.0},
        "scale": {"filebeat.output.bulk_max_size": 1600, "filebeat.output.worker": 1,
                  "filebeat.queue.mem.events": 3200, "filebeat.queue.mem.flush.min_events": 1600,
                  "filebeat.queue.mem.flush.timeout": 20.0},
        "latency": {"filebeat.output.bulk_max_size": 50, "filebeat.output.worker": 1,
                    "filebeat.queue.mem.events": 4100, "filebeat.queue.mem.flush.min_events": 2050,
                    "filebeat.queue.mem.flush.timeout": 1.0},
    },
)
