"""Durations as people type them, for TTLs, stage lengths and the like."""

import pytest

from models.units import parse_duration_s


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0),
                                          ("1.5m", 90.0), ("500ms", 0.5), ("1m30s", 90.0), (" 2 h ", 7200.0),
                                          ("0.25", 0.25), (45, 45.0), (1.5, 1.5)])
def test_reads_numbers_units_and_k6_compounds(text, seconds) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["ten minutes", "", "10x", "m", "nan", "1m30"])
def test_refuses_nonsense_naming_the_text_and_the_accepted_forms(text) -> None:
    with pytest.raises(ValueError, match="not a duration") as caught:
        parse_duration_s(text)
    assert repr(text) in str(caught.value) and "10m" in str(caught.value) and "ms" in str(caught.value)
