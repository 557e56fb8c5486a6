"""The `pipetune` command line: the one place that wires the rooms together."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="pipetune",
    help="Safe online auto-tuner for real-time log pipelines (Filebeat -> Logstash -> Kafka -> consumer).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
