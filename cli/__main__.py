"""`python -m cli`: the `pipetune` command line without its entry point (how the testbed starts its agent)."""

from cli.main import app

app(prog_name="pipetune")
