"""Workload specs become schedules one way, with the replay's documented defaults and errors naming the setting."""

from pathlib import Path

import numpy as np
import pytest

from replay.profiles import DEFAULT_DURATION_S, GENERATED, Profile, WorkloadError, WorkloadSpec, build_schedule


def _per_second(spec: WorkloadSpec) -> np.ndarray:
    return np.bincount(np.floor(build_schedule(spec).schedule.times_s).astype(int))


def test_a_burst_doubles_the_rate_over_the_middle_sixth_of_the_run_as_in_the_paper() -> None:
    counts = _per_second(WorkloadSpec(Profile.burst, 100.0, 180.0))
    assert counts[:60].mean() == pytest.approx(100) and counts[60:90].mean() == pytest.approx(200)
    assert counts[90:].mean() == pytest.approx(100)


def test_a_flash_sale_jumps_eightfold() -> None:
    counts = _per_second(WorkloadSpec(Profile.flash, 100.0, 180.0))
    assert counts[:60].max() <= 101 and 700 < counts[60] <= 800  # x8 at once, decaying within the second


def test_the_same_spec_gives_the_same_schedule_and_the_default_length() -> None:
    spec = WorkloadSpec("mmpp", 200.0, seed=3)
    first, again = build_schedule(spec).schedule, build_schedule(spec).schedule
    assert np.array_equal(first.times_s, again.times_s) and first.duration_s == DEFAULT_DURATION_S


@pytest.mark.parametrize("profile", GENERATED)
def test_every_generated_profile_needs_no_file(profile: Profile) -> None:
    assert build_schedule(WorkloadSpec(profile, 50.0, 20.0)).schedule.events > 0


@pytest.mark.parametrize("spec, field", [
    (WorkloadSpec("nope"), "profile"),
    (WorkloadSpec(rate_eps=0), "rate_eps"),
    (WorkloadSpec(duration_s=-1), "duration_s"),
    (WorkloadSpec(Profile.burst, duration_s=60, burst_window_s=(50, 70)), "burst_window_s"),
    (WorkloadSpec(Profile.flash, burst_factor=0.5), "burst_factor"),
    (WorkloadSpec(Profile.diurnal, depth=2), "depth"),
    (WorkloadSpec(Profile.mmpp, mmpp_dwell_s=(0, 5)), "mmpp_dwell_s"),
    (WorkloadSpec(Profile.stages), "stages_path"),
    (WorkloadSpec(Profile.stages, stages_path=Path("/nonexistent/stages.yaml")), "stages_path"),
    (WorkloadSpec(Profile.trace), "trace_path"),
    (WorkloadSpec(Profile.trace, trace_path=Path("t.log"), time_scale=0), "time_scale"),
])
def test_a_bad_setting_is_a_value_error_naming_its_field(spec: WorkloadSpec, field: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        build_schedule(spec)
    assert isinstance(caught.value, ValueError) and caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_stages_read_k6_durations(tmp_path: Path) -> None:
    stages = tmp_path / "stages.yaml"
    stages.write_text("stages:\n  - {duration: 500ms, target: 100}\n  - {duration: 1m30s, target: 100}\n")
    assert build_schedule(WorkloadSpec(Profile.stages, stages_path=stages)).schedule.duration_s == pytest.approx(90.5)


# What `k6 inspect` prints for `export const options = {stages: [...], thresholds: {...}}`: every option k6
# knows (mostly null), durations in Go's form, `<` escaped.
K6_OPTIONS = """{
  "paused": null, "vus": null, "duration": null, "iterations": null,
  "stages": [
    {"duration": "10s", "target": 100},
    {"duration": "1m0s", "target": 100},
    {"duration": "0s", "target": 125},
    {"duration": "1.5s", "target": 125},
    {"duration": "500ms", "target": 0}
  ],
  "scenarios": null, "rps": null, "dns": {"ttl": null, "select": null, "policy": null},
  "thresholds": {"http_req_failed": ["rate\\u003c0.01"]}, "summaryTrendStats": null
}"""


def test_a_k6_options_file_as_k6_writes_it_replays_its_stages(tmp_path: Path) -> None:
    path = tmp_path / "options.json"
    path.write_text(K6_OPTIONS)
    schedule = build_schedule(WorkloadSpec(Profile.stages, stages_path=path)).schedule
    assert schedule.duration_s == pytest.approx(72.0)
    counts = np.bincount(np.floor(schedule.times_s).astype(int))
    assert counts[:10].sum() == pytest.approx(500, abs=1)  # a 0 -> 100 ramp over 10 s
    assert (counts[10:70] == 100).all()
    assert counts[70] == 125  # the 0 s stage is a step to 125, as in k6
    assert [p.target_eps for p in schedule.phases] == pytest.approx([50, 100, 125, 62.5], abs=0.1)


def test_a_bare_number_is_milliseconds_in_k6_options_and_seconds_in_a_plain_list(tmp_path: Path) -> None:
    options, plain = tmp_path / "options.json", tmp_path / "stages.yaml"
    options.write_text('{"stages": [{"duration": 1500, "target": 10}]}')
    plain.write_text("- {duration: 3, target: 10}\n")
    assert build_schedule(WorkloadSpec(Profile.stages, stages_path=options)).schedule.duration_s == 1.5
    assert build_schedule(WorkloadSpec(Profile.stages, stages_path=plain)).schedule.duration_s == 3


@pytest.mark.parametrize("text, where", [
    ('{"stages": [{"duration": "1s", "target": 1}, {"target": 5}]}', "stages.1.duration: missing"),
    ('{"stages": [{"duration": "1s", "target": 1}, {"duration": "1s", "target": 2}, {"duration": "1x", '
     '"target": 3}]}', "stages.2.duration: '1x' is not a duration"),
    ('{"stages": [{"duration": "1s", "target": -4}]}', "stages.0.target: must be a number of events per second"),
    ('{"stages": [{"duration": "1s", "target": "many"}]}', "stages.0.target: must be a number"),
    ('{"stages": [{"duration": "1s"}]}', "stages.0.target: missing"),
    ('{"stages": ["1s"]}', "stages.0: expected {duration, target}"),
    ('{"stages": [{"duration": "0s", "target": 3}]}', "the stages last 0 s"),
    ('{"vus": 10}', "stages must be a non-empty list"),
    ("- {duration: 1s, target: 1}\n- {duration: soon, target: 1}\n", "1.duration: 'soon' is not a duration"),
])
def test_a_bad_stage_is_named_by_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "options.json"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        build_schedule(WorkloadSpec(Profile.stages, stages_path=path))
    assert caught.value.field == "stages_path"
    assert caught.value.message.startswith(f"{path}: ") and where in caught.value.message
