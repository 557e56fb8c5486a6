"""The daemon's state directory: the one interface between the daemon and the people steering it.

Files (JSON, so a person can read them), each with one writer:
- written by the API (people): `policy.json`, `overrides.json` (active overrides with their expiry),
  `control.json` (paused or not); the daemon re-reads them at every decision (level-triggered);
- written by the daemon: `incumbent.json`, `budget.json` (what the config before tuning used: the CPU
  budget's reference), `status.json` (a `Status`: mode, pipeline, incumbent, last
  decision, guardrail state, learner progress; rewritten every window), `observations.jsonl` (one line
  per measured window: config, offered load, the observation without its time series, its `Verdict`)
  and `decisions.jsonl` (one `Decision` a line: time, config diff, predicted vs observed with the window's
  cost, reason);
- appended by both: `audit.jsonl` (every change people made, and every override the daemon applied).
A daemon tuning several pools keeps one such directory per pool, `pools/NAME`, and lists them with each
pool's nodes in `pools.json`; a single pool keeps the directory itself (so state from before pools resumes).
Appends are flushed line by line; whole-file writes go through a temp file and a rename, so a
process killed at any moment leaves a readable directory that a restarted daemon resumes from.

A daemon that runs until stopped keeps its directory bounded: `decisions.jsonl` rotates at
`DECISION_LOG_BYTES` to `decisions.1.jsonl`, `decisions.2.jsonl`, ... (the oldest beyond
`DECISION_LOG_FILES` files is dropped); each decision carries its `seq`, its position in the whole log,
so paging stays stable across rotations. `observations.jsonl` is compacted to what the learner keeps
(`models.learning.kept_history`), which is all a resume needs.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel, Field

from models.budget import CostReference
from models.latency_bounds import lull_ceilings
from models.learning import HISTORY_BEST, HISTORY_RECENT, Context, at_or_below, kept_history, load_moved
from models.observation import Observation
from models.policy import Mode, Policy
from models.space import PIPELINE_SPACE, Config, Value
from models.verdict import Verdict, judge

Told = tuple[Config, Context, Observation, Verdict]  # one window as the learner is told it


DECISION_LOG_BYTES = 8 * 2**20  # ~8,000 decisions a file: weeks of 30 s windows, and a file an editor still opens
DECISION_LOG_FILES = 4  # the live file and three rotated ones: 32 MiB at most on disk
# observations.jsonl is compacted when it holds twice what the learner keeps: a rewrite every ~220 windows
OBSERVATIONS_KEPT = HISTORY_RECENT + HISTORY_BEST
INCUMBENT_LOADS = 8  # the incumbent's figures kept at other loads: 25 % apart, they span a 6x range of loads


class Action(StrEnum):
    """What the daemon did after a window (the values are the decision log's and the API's words)."""

    EXPLORE = "explore"  # applied the learner's candidate
    HOLD = "hold"  # kept the config (dwell, restart budget, converged learner, breach on the incumbent)
    ROLLBACK = "rollback"  # a guardrail or a failed apply sent the pipeline back to the incumbent
    REMEASURE = "remeasure"  # the load moved: measure the incumbent again
    RETURN = "return"  # the learner kept the incumbent over the config just measured: the incumbent is back
    OVERRIDE = "override"  # a person's override is in force
    ADVISE = "advise"  # mode advise: recommended, applied nothing
    FROZEN = "frozen"  # mode frozen, or the pipeline could not be read or reached
    PAUSED = "paused"  # a person paused the tuner
    REVERT = "revert"  # stopping with --on-exit revert: the config the daemon started from is back
    ERROR = "error"  # the window ended in an unexpected error: recorded, and the next window goes on
    RECOVER = "recover"  # on start: a rollout cut short by a kill mended, or a config changed while stopped adopted


class NodeRolloutReport(BaseModel):
    version: int = Field(description="the pool's config version the node runs")
    state: str = Field(description="pending, canary, promoted, rolled_back or failed")
    judgement: str = Field(default="", description="what the window after its promotion step said of it")


class RolloutReport(BaseModel):
    """A pool's canary rollout: a candidate goes to the canary nodes first, then to the rest in steps."""

    phase: str = Field(description="steady, canary (a candidate being judged), promoting or taking_back (a step "
                                   "showed a node worse)")
    promoted_version: int
    judgement: str = Field(description="the last canary judgement, or why a canary was taken back")
    nodes: dict[str, NodeRolloutReport]
    recovered: str = Field(default="", description="after a daemon restarted in the middle of a rollout, until the "
                                                   "pool's next window: what it found half done and what it did")


class OutcomeReport(BaseModel):
    """What the realizer concluded of a window (`controller.realizer.Outcome`): a pool's canary judged, or
    where its rollout stands."""

    kind: str = Field(description="applied, canary, promoted, reverted or taken_back")
    message: str = Field(description="the judgement, or where the config stands")
    effect_s: float | None = Field(default=None, description="judged: the change's effect on P95 net of the "
                                                              "controls, s")
    low_s: float | None = Field(default=None, description="judged: the low end of the effect's interval, s")
    high_s: float | None = Field(default=None, description="judged: the high end of the effect's interval, s")
    p95_sd_s: float | None = Field(default=None, description="judged: the spread of the P95 the learner is told, s")
    windows: int = Field(default=0, description="judged: how many of the canary's windows it rests on")


class Cost(BaseModel):
    """What a window's config cost (the `Observation`'s figures of it); null where nothing measured it (an
    operator's brokers that export no request rate, a node that reports no cores)."""

    cpu_cores: dict[str, float] = Field(default_factory=dict, description=(
        "CPU seconds per second each part used: filebeat, logstash, each broker (broker-<id>), pipetune's probe; "
        "on the twin also its writer, kafka, sink and background"))
    busiest_cpu_share: float | None = Field(default=None, description="the busiest node's CPU time over its cores, "
                                                                      "every process on it counted")
    packets_per_s: float | None = Field(default=None, description="what the pipeline's output sent per second: "
                                                                  "live, Filebeat's batches; on the twin, packets on "
                                                                  "the wire")
    produce_requests_per_s: float | None = Field(default=None, description="Produce requests into Kafka per second, "
                                                                           "as the brokers count them")
    kafka_bytes_in_per_s: float | None = Field(default=None, description="bytes into Kafka per second, as the "
                                                                         "brokers count them")

    @classmethod
    def of(cls, observation: Observation) -> "Cost":
        return cls(**{name: getattr(observation, name) for name in cls.model_fields})


# The last window's cost as gauges: (name, `Cost` key, help); the daemon's and the standalone API's
# /metrics (which reads them from the decision log's `observed`). CPU is one gauge labelled by part.
COST_GAUGES = (("pipetune_window_busiest_cpu_share", "busiest_cpu_share",
                "The busiest node's CPU time over its cores in the last window"),
               ("pipetune_window_produce_requests_per_second", "produce_requests_per_s",
                "Produce requests into Kafka per second in the last window, as the brokers count them"),
               ("pipetune_window_kafka_bytes_in_per_second", "kafka_bytes_in_per_s",
                "Bytes into Kafka per second in the last window, as the brokers count them"))
CPU_GAUGE = ("pipetune_window_cpu_cores", "CPU seconds per second each part used in the last window")


class Decision(BaseModel):
    """One step of the loop, as the decision log records it."""

    window: int
    t_s: float = Field(description="pipeline time at the end of the window, s")
    config: dict[str, Value] = Field(description="the config the window ran")
    observed: dict[str, float | dict[str, float] | None] = Field(
        description="what the window measured: latency, rates, backlog, and its cost (`Cost`'s keys; a decision "
                    "logged before costs were has none of them)")
    action: Action
    reason: str
    change: dict[str, list[Value]] = Field(default_factory=dict,
                                           description="parameter -> [from, to] applied after the window")
    recommendation: dict[str, list[Value]] = Field(default_factory=dict,
                                                   description="advise mode: parameter -> [from, to]")
    predicted: dict[str, float | None] = Field(default_factory=dict,
                                               description="what the learner expected of the change")
    guardrail: list[str] = Field(default_factory=list, description="guardrails the window breached")
    incumbent_p95_s: float | None = None
    pause_s: float = 0.0
    rollout: RolloutReport | None = Field(default=None, description="a pool of several nodes: its rollout as "
                                                                      "the window's judgement left it")
    outcome: OutcomeReport | None = Field(default=None, description="a pool of several nodes: what its realizer "
                                                                      "concluded of the window")
    error: str | None = Field(default=None, description="action error: the unexpected error, its type and message")


class LoadFigure(BaseModel):
    """The P95 one window of a config measured, the load it ran at, and whether it kept to the rules there (kept up
    with that load, within the CPU budget)."""

    offered_eps: float
    p95_s: float
    kept_up: bool = True  # False: it fell behind or went over budget there
    shipped_eps: float | None = None  # where it fell behind: what it shipped there, events/s (none: it did not)


class IncumbentReport(BaseModel):
    """The incumbent as status.json and incumbent.json hold it."""

    config: dict[str, Value]
    p95_s: float
    offered_eps: float
    cost: Cost | None = Field(default=None, description="what the incumbent cost when it measured its P95 (null: "
                                                        "an incumbent recorded before costs were)")
    other_loads: list[LoadFigure] = Field(default_factory=list, description=(
        "its latest window at each other load it ran at, oldest first: a candidate measured at such a load is "
        "judged against it without running the incumbent again"))


class OverrideReport(BaseModel):
    """An active override and how long it has left."""

    id: str
    params: dict[str, Value]
    reason: str
    created_at: float
    expires_at: float
    remaining_s: float
    override_bounds: bool
    vetoed: bool = Field(description="a guardrail rolled it back; the daemon no longer applies it")


class GuardrailReport(BaseModel):
    last_breaches: list[str] = Field(description="what the last window breached")
    rollbacks: int
    violation_s: float = Field(description="seconds of windows that breached a guardrail")


class LearnerReport(BaseModel):
    observations: int = Field(description="windows the learner has been told, resumed ones included")
    last_reason: str


class ClockOffsetReport(BaseModel):
    """A node's clock minus the controller's, as last estimated (controller/clocks.py)."""

    offset_s: float
    error_s: float = Field(description="half the round trip it was measured over: the true offset is within")
    measured_at: float
    warning: str | None = Field(None, description="set above 50 ms: latencies from this node are corrected by it")


class BudgetReport(BaseModel):
    """The budgets as the last window met them (`models.budget`): each limited cost's limit at its load, what it
    used, and the reference they follow; each cost in its unit (`units`: cores, req/s)."""

    limits: dict[str, float] = Field(description="cost -> its limit at the window's load, in its unit")
    used: dict[str, float] = Field(description="cost -> what the window used, in its unit")
    units: dict[str, str] = Field(default_factory=dict, description="cost -> its unit")
    reference_eps: float | None = Field(None, description="the mean load of the windows the reference was "
                                                          "measured in")
    reference: dict[str, float] = Field(default_factory=dict, description=(
        "cost -> what the config before tuning used there, in its unit (empty: not measured yet)"))
    reference_windows: int = Field(0, description="how many windows of the config before tuning the reference is "
                                                  "the mean of")
    noise_allowance: dict[str, float] = Field(default_factory=dict, description=(
        "cost -> by how much, as a share of its limit, a window may read over it for the reading's noise before "
        "it is a breach"))


class TunedSpaceReport(BaseModel):
    """What the pool's learner searches and which agent applies each; what it holds at the running config's value
    and why (`controller.tuned_space`)."""

    tuned: dict[str, list[str]] = Field(description="parameter the learner searches -> each agent's component that "
                                                    "applies it (node/component; twin on the twin)")
    held: dict[str, str] = Field(description="parameter the learner would search -> why it is held instead")
    managed: list[str] | None = Field(description="every parameter some agent of the pool applies (null: the twin, "
                                                  "which takes all); any other is held at the running config's value")
    ceilings: dict[str, float] = Field(default_factory=dict, description="a tuned wait every event of a lull sits "
                                       "out (a steady load hides it) -> the highest value the learner gives it: the "
                                       "run's starting value")


class Status(BaseModel):
    """The daemon's report of itself (status.json); null fields until it has run a window."""

    pipeline: str | None = None
    mode: Mode
    paused: bool
    window: int | None = None
    t_s: float | None = None
    updated_at: float | None = Field(None, description="wall time of the daemon's last report")
    current_config: dict[str, Value] | None = None
    incumbent: IncumbentReport | None = Field(None, description="best safe config, its P95, its cost and the load it "
                                                              "met")
    last_decision: Decision | None = None
    guardrail: GuardrailReport | None = None
    learner: LearnerReport | None = None
    overrides: list[OverrideReport] = Field(default_factory=list)
    clock_offsets: dict[str, ClockOffsetReport] = Field(default_factory=dict, description="node -> its clock offset")
    nodes: dict[str, dict[str, int] | None] = Field(
        default_factory=dict, description="node -> the config version each of its components runs (null: unknown, "
                                          "its agent did not answer); empty on the twin")
    rollout: RolloutReport | None = Field(default=None, description="a pool of several nodes: its canary rollout")
    tuned_space: TunedSpaceReport | None = Field(default=None, description="what is tuned, by which agent, and what "
                                                                           "is held and why")
    budget: BudgetReport | None = Field(default=None, description="the budgets at the last window (null: none "
                                                                   "set)")


@dataclass
class Incumbent:
    """The best config known to be safe, and what it measured at which load: its latest window, and its
    latest at each of up to `INCUMBENT_LOADS` other loads (a load that moves back and forth, as an MMPP's
    does, would otherwise send every candidate measured at another load back to the incumbent)."""

    config: Config
    p95_s: float
    offered_eps: float
    cost: Cost | None = None
    other_loads: tuple[LoadFigure, ...] = ()

    def figure_at(self, offered_eps: float) -> LoadFigure | None:
        """Its latest figure at about `offered_eps` (within `LOAD_SHIFT`), None where it never ran at about it. A
        window it fell behind in is newer than any it kept up in at about that load (`measured_again` drops it)."""
        near = [f for f in (LoadFigure(offered_eps=self.offered_eps, p95_s=self.p95_s), *reversed(self.other_loads))
                if not load_moved(f.offered_eps, offered_eps)]
        return next((f for f in near if not f.kept_up), near[0] if near else None)

    def measured_again(self, p95_s: float, offered_eps: float, cost: Cost | None) -> Incumbent:
        """The same config after another window it kept up in: that window is its latest, and its figures at the
        loads that window does not stand for are kept."""
        figures = (*self.other_loads, LoadFigure(offered_eps=self.offered_eps, p95_s=self.p95_s))
        kept = tuple(f for f in figures if load_moved(f.offered_eps, offered_eps))[-INCUMBENT_LOADS:]
        return replace(self, p95_s=p95_s, offered_eps=offered_eps, cost=cost, other_loads=kept)

    def breached(self, p95_s: float, offered_eps: float, shipped_eps: float | None = None) -> Incumbent:
        """The same config after a window it fell behind in (shipping `shipped_eps`), or went over the CPU budget in:
        at about that load, a candidate that keeps to the rules is better, whatever its P95. Its latest window that
        kept to them stays its headline figure."""
        kept = tuple(f for f in self.other_loads if load_moved(f.offered_eps, offered_eps))
        behind = LoadFigure(offered_eps=offered_eps, p95_s=p95_s, kept_up=False, shipped_eps=shipped_eps)
        return replace(self, other_loads=(*kept, behind)[-INCUMBENT_LOADS:])

    def shipped_when_behind(self, offered_eps: float) -> float | None:
        """The most events/s it shipped in a window it fell behind in at about `offered_eps` or a lower load: a config
        that cannot carry a load cannot carry a higher one, so it would fall behind at `offered_eps` too. None where
        it never fell behind at or below it."""
        shipped = [f.shipped_eps for f in self.other_loads
                   if f.shipped_eps is not None and at_or_below(f.offered_eps, offered_eps)]
        return max(shipped, default=None)

    def report(self) -> IncumbentReport:
        return IncumbentReport(config=dict(self.config), p95_s=self.p95_s, offered_eps=self.offered_eps,
                               cost=self.cost, other_loads=list(self.other_loads))


@dataclass
class Override:
    """A config forced by a person for a while; control returns to the learner when it expires."""

    id: str
    params: dict
    expires_at: float  # epoch seconds
    reason: str
    created_at: float = field(default_factory=time.time)
    override_bounds: bool = False

    def remaining_s(self, now: float | None = None) -> float:
        return max(0.0, self.expires_at - (time.time() if now is None else now))

    def report(self, vetoed: bool) -> OverrideReport:
        return OverrideReport(**asdict(self), remaining_s=self.remaining_s(), vetoed=vetoed)


def _observation_from(doc: dict) -> Observation:
    return Observation(**doc)


class StateStore:
    """Reads and writes one daemon's state directory."""

    def __init__(self, directory: str | Path, *, decision_log_bytes: int = DECISION_LOG_BYTES,
                 decision_log_files: int = DECISION_LOG_FILES) -> None:
        if decision_log_bytes < 1 or decision_log_files < 1:
            raise ValueError(f"decision_log_bytes and decision_log_files must be >= 1, "
                             f"got {decision_log_bytes} and {decision_log_files}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.decision_log_bytes = decision_log_bytes
        self.decision_log_files = decision_log_files
        self._next_seq: int | None = None  # read from the log at the first append
        self._observation_lines: int | None = None  # counted at the first append

    def _write(self, name: str, doc: object) -> None:
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.dir / name)

    def _append(self, name: str, doc: dict) -> None:
        with open(self.dir / name, "a+b") as handle:
            # a process killed mid-append leaves a partial line: start ours on a line of its own
            torn = handle.tell() > 0 and handle.seek(-1, os.SEEK_END) is not None and handle.read(1) != b"\n"
            handle.write((("\n" if torn else "") + json.dumps(doc) + "\n").encode())
            handle.flush()

    def _lines(self, name: str) -> list[dict]:
        path = self.dir / name
        if not path.exists():
            return []
        docs = []
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill mid-write: the rest is intact
        return docs

    def save_policy(self, policy: Policy) -> None:
        self._write("policy.json", policy.model_dump())

    def load_policy(self) -> Policy | None:
        path = self.dir / "policy.json"
        return Policy.model_validate_json(path.read_text()) if path.exists() else None

    def save_incumbent(self, incumbent: Incumbent) -> None:
        self._write("incumbent.json", incumbent.report().model_dump())

    def forget_incumbent(self) -> None:
        """No incumbent from now on: the next window's config becomes it (the pipeline changed under the daemon)."""
        (self.dir / "incumbent.json").unlink(missing_ok=True)

    def load_incumbent(self) -> Incumbent | None:
        path = self.dir / "incumbent.json"
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        report = IncumbentReport.model_validate(doc)
        return Incumbent(PIPELINE_SPACE.config(report.config), report.p95_s, report.offered_eps, report.cost,
                         tuple(report.other_loads))

    def save_cost_reference(self, reference: CostReference) -> None:
        self._write("budget.json", {"offered_eps": reference.offered_eps, "costs": dict(reference.costs),
                                    "windows": reference.windows})

    def ceilings(self, start: Config) -> dict[str, float]:
        """How high the learner may take each wait a lull sits out: as the run first started (`ceilings.json`), or,
        where nothing is stored yet, as `start` has them (stored now, so that a resumed run keeps them whatever it
        resumes on)."""
        stored = self._read("ceilings.json", None)
        if stored is None:
            stored = lull_ceilings(start)
            self._write("ceilings.json", stored)
        return {name: float(value) for name, value in stored.items()}

    def load_cost_reference(self) -> CostReference | None:
        path = self.dir / "budget.json"
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        costs = doc.get("costs", doc.get("cores", {}))  # "cores": a state dir from before the request budget
        return CostReference(float(doc["offered_eps"]), {k: float(v) for k, v in costs.items()},
                             int(doc.get("windows", 1)))

    def append_observation(self, config: Config, offered_eps: float, observation: Observation,
                           verdict: Verdict) -> None:
        doc = asdict(observation)
        doc.pop("series", None)
        doc.pop("clock_offsets", None)  # the node's clock, not the config's doing: the status shows the latest
        self._append("observations.jsonl", {"config": dict(config), "offered_eps": offered_eps, "observation": doc,
                                            "verdict": verdict.model_dump(mode="json")})
        if self._observation_lines is None:
            self._observation_lines = len(self._lines("observations.jsonl"))
        else:
            self._observation_lines += 1
        if self._observation_lines >= 2 * OBSERVATIONS_KEPT:
            self._compact_observations()

    def _compact_observations(self) -> None:
        """Rewrite observations.jsonl with only the windows the learner keeps (atomically, as every rewrite)."""
        docs = self._lines("observations.jsonl")
        kept = kept_history([d["observation"]["p95_s"] for d in docs],
                            ["verdict" in d and not d["verdict"]["breaches"] for d in docs])
        tmp = self.dir / ".observations.jsonl.tmp"
        tmp.write_text("".join(json.dumps(docs[i]) + "\n" for i in kept))
        os.replace(tmp, self.dir / "observations.jsonl")
        self._observation_lines = len(kept)

    def observations(self) -> list[tuple[Config, float, Observation, Verdict | None]]:
        """Every measured window with the verdict the daemon gave it (None: a line written before verdicts were)."""
        return [(PIPELINE_SPACE.config(d["config"]), d["offered_eps"], _observation_from(d["observation"]),
                 Verdict.model_validate(d["verdict"]) if "verdict" in d else None)
                for d in self._lines("observations.jsonl")]

    def told(self, policy: Policy) -> list[Told]:
        """Every measured window as the learner is told it: with its stored verdict, or judged again under
        `policy` (a line written before verdicts were), the window before it serving for the backlog trend."""
        told: list[Told] = []
        previous: Observation | None = None
        for config, offered_eps, observation, verdict in self.observations():
            told.append((config, Context(offered_eps), observation,
                         verdict if verdict is not None else judge(observation, policy, config, previous)))
            previous = observation
        return told

    def _decision_files(self) -> list[str]:
        """The decision log's files, newest first."""
        return ["decisions.jsonl"] + [f"decisions.{i}.jsonl" for i in range(1, self.decision_log_files)]

    def append_decision(self, decision: Decision) -> None:
        """Append `decision` with its `seq`, rotating the log first when the live file is full."""
        seq = self.logged_decisions()
        live = self.dir / "decisions.jsonl"
        if live.exists() and live.stat().st_size >= self.decision_log_bytes:
            self._rotate_decisions()
        self._append("decisions.jsonl", decision.model_dump() | {"seq": seq, "wall_time": time.time()})
        self._next_seq = seq + 1

    def _rotate_decisions(self) -> None:
        files = self._decision_files()
        (self.dir / files[-1]).unlink(missing_ok=True)
        for newer, older in zip(reversed(files[:-1]), reversed(files[1:])):
            if (self.dir / newer).exists():
                os.replace(self.dir / newer, self.dir / older)

    def logged_decisions(self) -> int:
        """How many decisions were ever logged (rotated-away ones included): the next decision's `seq`."""
        if self._next_seq is None:
            last = next(self.decisions_newest_first(), None)
            self._next_seq = 0 if last is None else last["seq"] + 1
        return self._next_seq

    def decisions_newest_first(self) -> Iterator[dict]:
        """Every retained decision, newest first, each with its `seq` (a log written before rotation existed
        numbers its lines from 0). Files are read one at a time, as far as the caller iterates."""
        previous_seq: int | None = None
        for name in self._decision_files():
            docs = self._lines(name)
            for position in reversed(range(len(docs))):
                doc = docs[position]
                seq = doc.setdefault("seq", position)
                # the log rotated while we read it: this file's lines were seen under its newer name
                if previous_seq is not None and seq >= previous_seq:
                    continue
                previous_seq = seq
                yield doc

    def decisions(self) -> list[dict]:
        """Every retained decision, oldest first."""
        return list(reversed(list(self.decisions_newest_first())))

    def _read(self, name: str, default: object) -> object:
        path = self.dir / name
        return json.loads(path.read_text()) if path.exists() else default

    def add_override(self, params: dict, ttl_s: float, reason: str, override_bounds: bool = False) -> Override:
        override = Override(secrets.token_hex(6), dict(params), time.time() + ttl_s, reason,
                            override_bounds=override_bounds)
        self._write("overrides.json", [asdict(o) for o in self.overrides()] + [asdict(override)])
        return override

    def overrides(self, active_at: float | None = None) -> list[Override]:
        """Overrides not yet expired at `active_at` (now by default)."""
        now = time.time() if active_at is None else active_at
        return [o for o in (Override(**d) for d in self._read("overrides.json", [])) if o.expires_at > now]

    def delete_override(self, override_id: str) -> bool:
        kept = [o for o in self.overrides() if o.id != override_id]
        found = len(kept) < len(self.overrides())
        self._write("overrides.json", [asdict(o) for o in kept])
        return found

    def set_paused(self, paused: bool) -> None:
        self._write("control.json", {"paused": paused, "changed_at": time.time()})

    def paused(self) -> bool:
        return bool(self._read("control.json", {}).get("paused", False))

    def save_status(self, status: Status) -> None:
        self._write("status.json", status.model_dump())

    def load_status(self) -> dict:
        return dict(self._read("status.json", {}))

    def append_audit(self, event: dict) -> None:
        self._append("audit.jsonl", {"time": time.time(), **event})

    def audit(self) -> list[dict]:
        return list(self._lines("audit.jsonl"))

    def vetoed_overrides(self) -> set[str]:
        """Ids of overrides a guardrail rolled back (the daemon audits each); they are not applied again."""
        return {e["id"] for e in self.audit() if e.get("action") == "override_rolled_back" and "id" in e}


POOLS_FILE = "pools.json"
DEFAULT_POOL = "default"


@dataclass(frozen=True)
class PoolDir:
    """Where one pool keeps its state, and the nodes it tunes."""

    name: str
    directory: Path
    nodes: tuple[str, ...]


def plan_pool_dirs(directory: Path, pools: dict[str, list[str]]) -> list[PoolDir]:
    """Each pool's state directory under `directory`: the directory itself for a single pool (today's layout,
    which resumes state from before pools), `pools/NAME` for each of several."""
    if len(pools) == 1:
        ((name, nodes),) = pools.items()
        return [PoolDir(name, directory, tuple(nodes))]
    return [PoolDir(name, directory / "pools" / name, tuple(nodes)) for name, nodes in pools.items()]


def save_pool_dirs(directory: Path, pools: list[PoolDir]) -> None:
    """Write `pools.json`, which tells the API (in this process or in `pipetune api`) which pools there are."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = {p.name: {"dir": str(p.directory.relative_to(directory)), "nodes": list(p.nodes)} for p in pools}
    tmp = directory / f".{POOLS_FILE}.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, directory / POOLS_FILE)


def load_pool_dirs(directory: Path) -> list[PoolDir]:
    """The pools `pools.json` lists; a directory without it (a daemon from before pools) is the one pool
    `default`, whose nodes are unknown."""
    path = directory / POOLS_FILE
    if not path.exists():
        return [PoolDir(DEFAULT_POOL, directory, ())]
    doc = json.loads(path.read_text())
    return [PoolDir(name, directory / entry["dir"], tuple(entry["nodes"])) for name, entry in doc.items()]
