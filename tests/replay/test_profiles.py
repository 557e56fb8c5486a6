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
