"""The `pipetune` command line: the one place that wires the rooms together."""

from __future__ import annotations

import typer

from cli.agent import agent_app
from cli.api import register_api_commands
from cli.autotune import autotune_command
from cli.calibrate import calibrate_command
from cli.measure import measure_command
from cli.replay import replay_command
from cli.scenarios import scenarios_command
from cli.testbed import testbed_app
from cli.tradeoff import tradeoff_command

app = typer.Typer(
    name="pipetune",
    help="Safe online auto-tuner for real-time log pipelines (Filebeat -> Logstash -> Kafka -> consumer).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """pipetune: tune buffer sizes, flush timeouts and scan intervals of a log pipeline on line,
    to minimise P95 end-to-end latency while throughput keeps up with the load."""


app.command("autotune")(autotune_command)
app.command("replay")(replay_command)
app.command("scenarios")(scenarios_command)
app.add_typer(testbed_app, name="testbed")
app.command("measure")(measure_command)
app.command("calibrate")(calibrate_command)
app.command("tradeoff")(tradeoff_command)
register_api_commands(app)
app.add_typer(agent_app, name="agent")
