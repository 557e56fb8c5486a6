"""The rooms' import rules (README, Layout), checked on the source: models <- replay, agents <- controller
<- api <- cli; controller never imports testbed; only the command line (and the benchmarks) speak Typer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("models", "replay", "agents", "controller", "api", "cli", "testbed", "bench")


def imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, wherever in the file (function-level imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def imports_of(room: str) -> dict[str, set[str]]:
    return {str(p.relative_to(ROOT)): imported(p) for p in sorted((ROOT / room).rglob("*.py"))}


def offenders(room: str, forbidden: set[str]) -> dict[str, set[str]]:
    return {path: names & forbidden for path, names in imports_of(room).items() if names & forbidden}


@pytest.mark.parametrize("room", [r for r in ROOMS if r not in ("cli", "bench")])
def test_only_the_command_line_and_the_benchmarks_import_typer(room: str) -> None:
    assert offenders(room, {"typer"}) == {}


def test_models_import_none_of_the_other_rooms() -> None:
    assert offenders("models", set(ROOMS) - {"models"}) == {}


@pytest.mark.parametrize("room", ["replay", "agents"])
def test_replay_and_agents_import_only_models(room: str) -> None:
    assert offenders(room, set(ROOMS) - {"models", room}) == {}


def test_api_does_not_import_the_command_line() -> None:
    assert offenders("api", {"cli"}) == {}


def test_controller_imports_neither_api_nor_the_command_line_nor_the_testbed() -> None:
    # the live path speaks to agents and telemetry wherever they run, never to this machine's testbed
    assert offenders("controller", {"api", "cli", "testbed"}) == {}


def test_the_checks_see_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from cli.main import app\n    import typer.testing\n")
    assert imported(source) == {"os", "cli", "typer"}
