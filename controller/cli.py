"""The `pipetune` command line: the one place that wires the rooms together."""

from __future__ import annotations

import typer

from controller.agent_cmd import agent_command
from controller.api_cmd import register_api_commands
from controller.autotune_cmd import autotune_command
from controller.calibrate_cmd import calibrate_command
from controller.replay_cmd import replay_command
from controller.scenarios import scenarios_command
from controller.measure_cmd import measure_command
from controller.testbed_cli import testbed_app

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
register_api_commands(app)
app.command("agent")(agent_command)


if __name__ == "__main__":  # `python -m controller.cli`: how the testbed starts its agent
    app()
