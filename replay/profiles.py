"""Workload profiles -> arrival schedules: the one place a profile and its settings become send times.

Every caller (the replay command, the tuning daemon's twin, the live testbed's background load, the
testbed's measurements, the benchmarks) describes its workload as a `WorkloadSpec` and gets the same
schedule for the same spec. The defaults are the replay's documented ones: a burst is ×2 over 1/3-1/2
of the run (the paper's robustness check: 60-90 s of 180 s), a flash sale ×8, MMPP ×4 with 20 s / 5 s
mean dwell, a diurnal cycle of one run with depth 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import yaml

from models.units import parse_duration_s
from replay import arrivals
from replay.arrivals import Schedule, Stage
from replay.engine import Workload
from replay.trace import TraceError, read_trace

DEFAULT_DURATION_S = 180.0  # the paper's run length
DEFAULT_BURST_FACTOR = {"burst": 2.0, "flash": 8.0, "mmpp": 4.0}


class Profile(str, Enum):
    """Arrival processes; `stages` and `trace` take their shape (and length) from a file."""

    steady = "steady"
    burst = "burst"
    flash = "flash"
    diurnal = "diurnal"
    stages = "stages"
    mmpp = "mmpp"
    trace = "trace"


# Profiles built from a rate and a length alone, with no file: what the tuner and the testbed generate.
GENERATED = (Profile.steady, Profile.burst, Profile.flash, Profile.diurnal, Profile.mmpp)
GENERATED_NAMES = tuple(p.value for p in GENERATED)


class WorkloadError(ValueError):
    """A setting of a `WorkloadSpec` that cannot make a schedule; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class WorkloadSpec:
    """What to offer: a profile at a base rate over a run, and the profile's own settings."""

    profile: Profile | str = Profile.steady
    rate_eps: float = 300.0
    duration_s: float | None = None  # None: DEFAULT_DURATION_S; stages and trace: their own length
    seed: int = 0
    poisson: bool = False  # False: evenly spaced, the paper's constant-rate generator
    burst_window_s: tuple[float, float] | None = None  # burst/flash START, END; None: 1/3 to 1/2 of the run
    burst_factor: float | None = None  # None: DEFAULT_BURST_FACTOR of the profile
    stages_path: Path | None = None  # stages: k6-style [{duration, target}] YAML/JSON
    trace_path: Path | None = None  # trace: an access log whose arrivals (and requests) are replayed
    time_scale: float = 1.0  # trace: replay this many times faster
    amplify: float = 1.0  # trace: events per original request
    period_s: float | None = None  # diurnal: cycle length; None: the run
    depth: float = 0.5  # diurnal: relative swing, 0..1
    mmpp_dwell_s: tuple[float, float] = (20.0, 5.0)  # mmpp: mean seconds in the normal and burst states


@dataclass(frozen=True)
class BuiltWorkload:
    """A spec made concrete: the send times, what to send, and what a trace had to skip (for the user)."""

    schedule: Schedule
    workload: Workload
    trace_summary: str | None = None


def load_stages(path: Path) -> list[Stage]:
    """Read stages from a YAML or JSON file: a list of `{duration, target}`, or a k6 `options` document.

    A k6 options document (a mapping with `stages`, as `k6 inspect` writes it) is read as k6 reads it:
    its other keys are ignored and a bare number as a duration is milliseconds. In the plain list a bare
    number is seconds. A target is in events per second (k6's VUs or iterations per second). A bad
    stage is named by its path in the file, e.g. `stages.2.duration`.
    """
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise WorkloadError("stages_path", f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise WorkloadError("stages_path", f"{path} is not YAML/JSON: {exc}") from None
    k6_options = isinstance(doc, dict)
    items, where = (doc.get("stages"), "stages") if k6_options else (doc, "")
    if not isinstance(items, list) or not items:
        raise WorkloadError("stages_path", f"{path}: {where or 'the file'} must be a non-empty list of "
                                           f"{{duration, target}} stages")
    plan = [_stage(item, f"{where}.{i}" if where else str(i), path, k6_options) for i, item in enumerate(items)]
    if not sum(stage.duration_s for stage in plan) > 0:
        raise WorkloadError("stages_path", f"{path}: the stages last 0 s; at least one needs a duration > 0")
    return plan


def _stage(item: object, where: str, path: Path, k6_options: bool) -> Stage:
    def bad(key: str, problem: str) -> WorkloadError:
        return WorkloadError("stages_path", f"{path}: {where}.{key}: {problem}")

    if not isinstance(item, dict):
        raise WorkloadError("stages_path", f"{path}: {where}: expected {{duration, target}}, got {item!r}")
    for key in ("duration", "target"):
        if item.get(key) is None:
            raise bad(key, "missing")
    duration = item["duration"]
    if k6_options and isinstance(duration, (int, float)) and not isinstance(duration, bool):
        duration = f"{duration}ms"  # k6 reads a bare number as milliseconds
    try:
        duration_s = parse_duration_s(duration)
    except ValueError as exc:
        raise bad("duration", str(exc)) from None
    if not duration_s >= 0:
        raise bad("duration", f"must be >= 0, got {item['duration']!r}")
    target = item["target"]
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not target >= 0:
        raise bad("target", f"must be a number of events per second >= 0, got {target!r}")
    return Stage(duration_s, float(target))


def _profile(value: Profile | str) -> Profile:
    try:
        return Profile(value)
    except ValueError:
        raise WorkloadError("profile", f"must be one of {', '.join(p.value for p in Profile)}, got {value!r}") from None


def _check(spec: WorkloadSpec) -> None:
    if not spec.rate_eps > 0:
        raise WorkloadError("rate_eps", f"must be > 0 events per second, got {spec.rate_eps:g}")
    if spec.duration_s is not None and not spec.duration_s > 0:
        raise WorkloadError("duration_s", f"must be > 0 seconds, got {spec.duration_s:g}")
    if spec.burst_factor is not None and spec.burst_factor < 1:
        raise WorkloadError("burst_factor", f"must be >= 1, got {spec.burst_factor:g}")


def _window(spec: WorkloadSpec, length_s: float) -> tuple[float, float]:
    if spec.burst_window_s is None:
        return length_s / 3, length_s / 2
    start, end = spec.burst_window_s
    if not 0 <= start < end <= length_s:
        raise WorkloadError("burst_window_s", f"window {start:g}:{end:g} must lie within the run, 0:{length_s:g} s")
    return start, end


def build_schedule(spec: WorkloadSpec) -> BuiltWorkload:
    """The arrival schedule (and request source) of `spec`; `WorkloadError` names the setting at fault."""
    profile = _profile(spec.profile)
    _check(spec)
    length_s = spec.duration_s if spec.duration_s is not None else DEFAULT_DURATION_S
    factor = spec.burst_factor or DEFAULT_BURST_FACTOR.get(profile.value, 1.0)
    rate, poisson, seed = spec.rate_eps, spec.poisson, spec.seed
    if profile is Profile.steady:
        return BuiltWorkload(arrivals.steady(rate, length_s, poisson=poisson, seed=seed), Workload())
    if profile is Profile.burst:
        start, end = _window(spec, length_s)
        return BuiltWorkload(arrivals.step_burst(rate, length_s, start, end, factor, poisson=poisson, seed=seed),
                             Workload())
    if profile is Profile.flash:
        start, end = _window(spec, length_s)
        return BuiltWorkload(arrivals.flash_sale(rate, length_s, start, end, factor, poisson=poisson, seed=seed),
                             Workload())
    if profile is Profile.diurnal:
        if not 0 <= spec.depth <= 1:
            raise WorkloadError("depth", f"must be in [0, 1], got {spec.depth:g}")
        if spec.period_s is not None and spec.period_s <= 0:
            raise WorkloadError("period_s", f"must be > 0 seconds, got {spec.period_s:g}")
        return BuiltWorkload(arrivals.diurnal(rate, length_s, spec.period_s or length_s, spec.depth, poisson=poisson,
                                              seed=seed), Workload())
    if profile is Profile.mmpp:
        normal_s, burst_s = spec.mmpp_dwell_s
        if not (normal_s > 0 and burst_s > 0):
            raise WorkloadError("mmpp_dwell_s", f"both mean dwells must be > 0 seconds, got {normal_s:g}:{burst_s:g}")
        return BuiltWorkload(arrivals.mmpp(rate, length_s, factor, normal_s, burst_s, seed=seed), Workload())
    if profile is Profile.stages:
        if spec.stages_path is None:
            raise WorkloadError("stages_path", "the stages profile needs a stages file")
        return BuiltWorkload(arrivals.stages(load_stages(spec.stages_path), poisson=poisson, seed=seed), Workload())
    return _trace(spec)


def _trace(spec: WorkloadSpec) -> BuiltWorkload:
    if spec.trace_path is None:
        raise WorkloadError("trace_path", "the trace profile needs a trace file")
    if spec.time_scale <= 0:
        raise WorkloadError("time_scale", f"must be > 0, got {spec.time_scale:g}")
    if spec.amplify <= 0:
        raise WorkloadError("amplify", f"must be > 0, got {spec.amplify:g}")
    try:
        report = read_trace(spec.trace_path)
    except TraceError as exc:
        raise WorkloadError("trace_path", str(exc)) from None
    stamps = np.array([r.ts_s for r in report.records])
    schedule = arrivals.trace(stamps, time_scale=spec.time_scale, amplify=spec.amplify, duration_s=spec.duration_s,
                              seed=spec.seed)
    return BuiltWorkload(schedule, Workload(trace_records=tuple(report.records)),
                         report.summary() if report.malformed else None)
