"""The daemon's state directory: policy, incumbent, every observation, and the decision log.

Files (JSON, so a person can read them): `policy.json`, `incumbent.json`, `observations.jsonl` (one
line per measured window: config, offered load, the observation without its time series) and
`decisions.jsonl` (one line per decision: time, config diff, predicted vs observed, reason). Appends
are flushed line by line; whole-file writes go through a temp file and a rename, so a daemon killed
at any moment leaves a readable directory that a restarted daemon resumes from.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from models.observation import Observation
from models.policy import Policy
from models.space import PIPELINE_SPACE, Config


@dataclass
class Incumbent:
    """The best config known to be safe, and what it measured at which load."""

    config: Config
    p95_s: float
    offered_eps: float

    def to_dict(self) -> dict:
        return {"config": dict(self.config), "p95_s": self.p95_s, "offered_eps": self.offered_eps}


def _observation_from(doc: dict) -> Observation:
    return Observation(**doc)


class StateStore:
    """Reads and writes one daemon's state directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _write(self, name: str, doc: object) -> None:
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.dir / name)

    def _append(self, name: str, doc: dict) -> None:
        with open(self.dir / name, "a") as handle:
            handle.write(json.dumps(doc) + "\n")
            handle.flush()

    def _lines(self, name: str) -> Iterator[dict]:
        path = self.dir / name
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill mid-write: the rest is intact

    def save_policy(self, policy: Policy) -> None:
        self._write("policy.json", policy.model_dump())

    def load_policy(self) -> Policy | None:
        path = self.dir / "policy.json"
        return Policy.model_validate_json(path.read_text()) if path.exists() else None

    def save_incumbent(self, incumbent: Incumbent) -> None:
        self._write("incumbent.json", incumbent.to_dict())

    def load_incumbent(self) -> Incumbent | None:
        path = self.dir / "incumbent.json"
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        return Incumbent(PIPELINE_SPACE.config(doc["config"]), doc["p95_s"], doc["offered_eps"])

    def append_observation(self, config: Config, offered_eps: float, observation: Observation) -> None:
        doc = asdict(observation)
        doc.pop("series", None)
        self._append("observations.jsonl", {"config": dict(config), "offered_eps": offered_eps, "observation": doc})

    def observations(self) -> list[tuple[Config, float, Observation]]:
        return [(PIPELINE_SPACE.config(d["config"]), d["offered_eps"], _observation_from(d["observation"]))
                for d in self._lines("observations.jsonl")]

    def append_decision(self, decision: dict) -> None:
        self._append("decisions.jsonl", decision)

    def decisions(self) -> list[dict]:
        return list(self._lines("decisions.jsonl"))
