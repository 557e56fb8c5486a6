"""bench.spark_floor's figures: each step's median and P95, and the end-to-end floor a batch's commit implies."""

import pytest

from bench import spark_floor


def test_each_step_has_its_median_and_p95_and_the_whole_commit_the_floor_it_implies():
    samples = {step: [0.1 * (i + 1) for i in range(20)] for step in spark_floor.STEPS}
    samples["plain parquet write"] = [0.2] * 20
    rows = {row["step"]: row for row in spark_floor.step_rows(150, samples)}
    whole = rows["whole commit (Sink.write)"]
    assert whole["rows"] == 150
    assert whole["median_s"] == pytest.approx(1.05) and whole["p95_s"] == pytest.approx(1.9)
    assert whole["e2e_p95_floor_s"] == pytest.approx(1.95 * 1.05)  # the wait for the running batch, then its own
    assert rows["plain parquet write"]["median_s"] == 0.2 and rows["plain parquet write"]["e2e_p95_floor_s"] is None


@pytest.mark.parametrize("argv, message", [(["--rows", "1,x"], "--rows: '1,x' is not a comma-separated list"),
                                           (["--rows", "0"], "--rows: 0: each allowed 1 to 100000"),
                                           (["--batches", "2"], "--batches: 2, allowed 3 or more")])
def test_bad_arguments_name_the_flag_and_the_allowed_range(argv, message, capsys):
    with pytest.raises(SystemExit):
        spark_floor.main(argv)
    assert message in capsys.readouterr().err
