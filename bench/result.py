"""One result format for every benchmark: what ran, on which commit, on how busy a machine, when, and its figures.

Each bench/*.py script writes one `BenchResult` as JSON (`--json PATH`, or `--out DIR` → DIR/result.json), and
`python -m bench.results` builds docs/results.md from them, so every figure in the docs names the run it came from.
A figure is only as good as the machine was quiet: the load averages at start and end say how shared it was.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULT_FILE = "result.json"  # the name under an --out DIR

Row = dict[str, Any]  # one table row: column -> a number, a string, a bool or None
Figures = list[Row] | dict[str, list[Row]]  # one table, or several by title


@dataclass(frozen=True)
class BenchResult:
    """One run of one benchmark. `figures` are what docs/results.md shows as tables; `details` is the rest of the
    run's record (decision logs, per-window series) that plots and re-reports read."""

    name: str  # the module, e.g. "bench.convergence"
    command: str  # as typed, e.g. "python -m bench.convergence --seed 1"
    commit: str  # the git commit the run was made on
    dirty: bool  # the work tree had uncommitted changes: the code was the commit plus them
    cores: int
    load_start: list[float] | None  # os.getloadavg() (1, 5, 15 min) as the run began; None: not recorded
    load_end: list[float] | None
    started_utc: str | None  # ISO 8601; None: not recorded
    finished_utc: str | None
    figures: Figures = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # anything a reader must know to trust the figures

    @classmethod
    def start(cls, name: str, argv: list[str] | None = None) -> BenchResult:
        """A run of `name` beginning now, with this process's arguments (or `argv`)."""
        args = sys.argv[1:] if argv is None else argv
        commit, dirty = _git_head()
        return cls(name=name, command=shlex.join(["python", "-m", name, *args]), commit=commit, dirty=dirty,
                   cores=os.cpu_count() or 1, load_start=list(os.getloadavg()), load_end=None,
                   started_utc=_now(), finished_utc=None)

    def finish(self, figures: Figures, details: dict[str, Any] | None = None) -> BenchResult:
        """The run ended now with these figures."""
        return replace(self, figures=figures, details=details or {}, load_end=list(os.getloadavg()),
                       finished_utc=_now())

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1, default=str) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> BenchResult:
        return cls(**json.loads(path.read_text()))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git_head() -> tuple[str, bool]:
    """(HEAD's commit, whether tracked files differ from it); ("unknown", False) outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    try:
        return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
