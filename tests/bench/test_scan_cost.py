"""The scan-cost bench's fit recovers the per-scan and per-file costs its cells are made of."""

import pytest

from bench.scan_cost import IDLE_FILES, SCAN_S, fit


def test_the_fit_recovers_the_costs_of_a_scan_and_of_each_file_it_stats():
    base, per_scan, per_file = 0.002, 4e-4, 6e-6
    rows = [{"input": "filestream", "idle_files": n, "scan_s": s,
             "cpu_cores": base + (per_scan + n * per_file) / s + (1e-5 if k % 2 else -1e-5)}
            for k, (n, s) in enumerate((n, s) for n in IDLE_FILES for s in SCAN_S)]
    fitted = fit(rows)
    assert fitted["cpu_per_scanned_file_s"] == pytest.approx(per_file, rel=0.01)
    assert fitted["cpu_per_scan_s"] == pytest.approx(per_scan, rel=0.05)
    assert fitted["base_cores"] == pytest.approx(base, abs=2e-5) and fitted["r2"] > 0.99
