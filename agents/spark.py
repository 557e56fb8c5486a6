"""A Spark Structured Streaming query's micro-batch settings: the trigger interval, `maxOffsetsPerTrigger`,
`minOffsetsPerTrigger` with `maxTriggerDelay` (the Kafka source's, Spark 3.3 on) and `spark.sql.shuffle.partitions`,
kept in the job's own properties file (testbed/spark_job.py reads it, or the same file through `spark-submit`).

The agent patches the tuned keys of that file in place (every other byte stays, agents/rebase.py), checks the values
as the job reads them, and asks the job to reload (`POST <job>/reload`): the job stops its query at a batch boundary
and starts it again from its checkpoint on the file, in the same session. Health is the query's progress
(`GET <job>/progress`): the query runs the file's settings, and a trigger of the run started since has completed
(its `lastProgress` is of that run). A change that fails there is rolled back by the agent like any other: the
previous file written back and reloaded; the table stays exactly-once, as a batch the stop cut short is re-run from
the offset log into the same partition.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

from agents.adapter import Applied, Health, Runtime, ValidationFailed, read_text
from agents.kafka import properties_file
from agents.rebase import OnDisk, to_rewrite
from models.components.spark import MAX_OFFSETS_NO_LIMIT
from models.space import PIPELINE_SPACE, ChangeCost, Config, Param, Value

# Our parameter -> the job's key in its properties file, and the key of `/progress`'s settings that reports it.
KEYS = {"spark.trigger.interval": ("trigger.interval.s", "trigger_interval_s"),
        "spark.maxOffsetsPerTrigger": ("maxOffsetsPerTrigger", "max_offsets_per_trigger"),
        "spark.minOffsetsPerTrigger": ("minOffsetsPerTrigger", "min_offsets_per_trigger"),
        "spark.maxTriggerDelay": ("maxTriggerDelay", "max_trigger_delay_s"),
        "spark.sql.shuffle.partitions": ("spark.sql.shuffle.partitions", "shuffle_partitions")}
# Spark's "none" of each limit, by parameter: the key left empty, as the testbed writes it (the job reads 0 the same
# and reports 0 in its progress). No minimum is 0, the bottom of its range; no maximum the top of its range.
MAX_OFFSETS, MIN_OFFSETS = "spark.maxOffsetsPerTrigger", "spark.minOffsetsPerTrigger"
NO_LIMIT = {MAX_OFFSETS: MAX_OFFSETS_NO_LIMIT, MIN_OFFSETS: 0}
DELAY = "spark.maxTriggerDelay"
# Spark's time strings (JavaUtils.timeStringAsMs): an integer, a unit or none (milliseconds), case and spaces aside.
TIME_STRING = re.compile(r"(-?[0-9]+)([a-z]+)?")
TIME_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
SPARK_MAX_TRIGGER_DELAY_S = 900.0  # Spark's default, "15m"


def spark_seconds(text: str) -> float:
    """A Spark time string ("15m", "2500ms", "30s"; no unit is milliseconds) in seconds; `ValueError` saying what Spark
    takes. Empty: Spark's default for maxTriggerDelay."""
    text = text.strip().lower()
    if not text:
        return SPARK_MAX_TRIGGER_DELAY_S
    match = TIME_STRING.fullmatch(text)
    if match is None or (match.group(2) or "ms") not in TIME_UNITS_S:
        raise ValueError(f"{text!r} is not a Spark time string: an integer with one of "
                         f"{', '.join(TIME_UNITS_S)} (none: ms)")
    return int(match.group(1)) * TIME_UNITS_S[match.group(2) or "ms"]


def _text(param: Param, value: Value) -> str:
    if param.name in NO_LIMIT and int(value) == NO_LIMIT[param.name]:
        return ""
    if param.name == DELAY:
        return f"{round(float(value) * 1000)}ms"  # Spark takes whole units only: the parameter's step, 1 ms
    if param.kind == "int":
        return str(int(value))
    return f"{float(value):.3f}".rstrip("0").rstrip(".") or "0"  # the trigger to the millisecond, "2" not "2.0"


def _read_as(param: Param, text: str) -> Value | None:
    """A key's text as the job reads it (empty, or 0: the job's default, no limit); None when it does not read."""
    text = text.strip()
    if param.name in NO_LIMIT and text in ("", "0"):
        return NO_LIMIT[param.name]
    try:
        if param.name == DELAY:
            return spark_seconds(text)
        return int(text) if param.kind == "int" else float(text)
    except ValueError:
        return None


class SparkQueryAdapter:
    """One Structured Streaming job: its properties file's micro-batch keys, its `/reload` and `/progress`."""

    params: tuple[Param, ...] = tuple(PIPELINE_SPACE[name] for name in KEYS)

    def __init__(self, name: str, properties: Path, url: str, *, reload_timeout_s: float = 120.0) -> None:
        self.name = name
        self.properties = properties
        self.url = url.rstrip("/")  # the job's HTTP endpoints (its metrics port)
        self.reload_timeout_s = reload_timeout_s

    def _on_disk(self, text: str) -> list[OnDisk]:
        """Each tuned key as the file has it: where (`file:line key`), its text, the value the job reads there."""
        last = {entry.key: entry for entry in properties_file.entries(text)}
        return [self._key(param, last.get(KEYS[param.name][0])) for param in self.params]

    def _key(self, param: Param, entry: properties_file.Entry | None) -> OnDisk:
        key = KEYS[param.name][0]
        if entry is None:  # the job's default: what Spark does without it
            return OnDisk(param.name, f"{self.properties} {key}", None, param.default)
        return OnDisk(param.name, f"{self.properties}:{entry.line} {key}", entry.value, _read_as(param, entry.value))

    def read(self) -> dict[str, Value]:
        """What the file holds now for each parameter (Spark's default where it sets none)."""
        return {found.param: found.value for found in self._on_disk(read_text(self.properties))
                if found.value is not None}

    def patch(self, config: Config, base: Config | None = None) -> dict[Path, str]:
        """The properties file with `config`'s values rebased onto it as it is now."""
        text = read_text(self.properties)
        target = {p.name: _read_as(p, _text(p, config[p.name])) for p in self.params}
        written = None if base is None else {p.name: _read_as(p, _text(p, base[p.name])) for p in self.params}
        rewrite = to_rewrite(self._on_disk(text), target, written)
        values = {KEYS[key.param][0]: _text(PIPELINE_SPACE[key.param], config[key.param]) for key in rewrite}
        return {self.properties: properties_file.patch(text, values)}

    def validate(self, files: Mapping[Path, str]) -> None:
        """Each tuned key reads as the job reads it, within its parameter's range."""
        props = properties_file.read(files[self.properties])
        for param in self.params:
            key = KEYS[param.name][0]
            if key not in props:
                continue
            value = _read_as(param, props[key])
            if value is None or not param.low <= float(value) <= param.high:
                raise ValidationFailed(f"{self.properties} {key}={props[key]!r}: the job reads {param.name} as "
                                       f"{param.allowed()}")

    def apply(self, config: Config, runtime: Runtime | None, cost: ChangeCost) -> Applied:
        """`POST /reload`: the job reads its file again and restarts its query from the checkpoint on it; nothing when
        the query runs the file's settings already (the agent's first start, a rollback to what runs)."""
        started = time.monotonic()
        while True:  # a job still starting (the agent may start beside it) is waited for, not reloaded
            try:
                self.progress()
                break
            except (OSError, ValueError) as err:
                if time.monotonic() - started > self.reload_timeout_s:
                    raise RuntimeError(f"{self.name}: GET {self.url}/progress did not answer within "
                                       f"{self.reload_timeout_s:g} s: {err}") from None
                time.sleep(0.5)
        if self._running_as_file():
            return Applied("already in force", time.monotonic() - started)
        request = urllib.request.Request(self.url + "/reload", data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.reload_timeout_s) as response:
                json.loads(response.read() or b"{}")
                return Applied("query restarted from its checkpoint", time.monotonic() - started)
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:2000]
            raise RuntimeError(f"{self.name}: POST {self.url}/reload answered {err.code}: {detail}") from None

    def progress(self) -> dict:
        with urllib.request.urlopen(self.url + "/progress", timeout=10.0) as response:
            return json.loads(response.read())

    def health(self) -> Health:
        """The query runs the file's settings, and a trigger of its current run has completed."""
        try:
            state = self.progress()
            wanted = self._wanted_as_reported()
        except (OSError, ValueError, ValidationFailed) as err:
            return Health(False, f"GET {self.url}/progress: {err}")
        if not state.get("active"):
            return Health(False, "the query is not active")
        settings = state.get("settings") or {}
        off = {k: (settings.get(k), v) for k, v in wanted.items() if not _same(settings.get(k), v)}
        if off:
            return Health(False, "the query runs other settings than its file's (running, file): " + json.dumps(off))
        last = state.get("last")
        if not last or last.get("runId") != state.get("run_id"):
            return Health(False, f"no trigger of run {state.get('run_id')} completed yet")
        return Health(True, f"batch {last.get('batchId')} of run {state.get('run_id')} at {last.get('timestamp')}")

    def _running_as_file(self) -> bool:
        try:
            state = self.progress()
            wanted = self._wanted_as_reported()
        except (OSError, ValueError, ValidationFailed):
            return False
        settings = state.get("settings") or {}
        return bool(state.get("active")) and all(_same(settings.get(k), v) for k, v in wanted.items())

    def _wanted_as_reported(self) -> dict[str, Value]:
        """The file's values (the defaults where it sets none) as the job's `/progress` reports them: by its keys,
        a limit that is none as 0."""
        return {KEYS[key.param][1]: 0 if key.param in NO_LIMIT and key.value == NO_LIMIT[key.param] else key.value
                for key in self._on_disk(read_text(self.properties))}


def _same(a: object, b: object) -> bool:
    try:
        return abs(float(a) - float(b)) < 1e-9  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
