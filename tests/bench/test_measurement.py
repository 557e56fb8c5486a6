"""bench.measurement's contenders: the paper's Hybrid is measured as an agent takes it, not left out."""

from bench.measurement import contenders


def test_the_papers_hybrid_is_among_the_contenders_with_its_backoffs_in_filebeats_order():
    measured = contenders()
    assert {"defaults", "hybrid", "latency", "low-latency"} <= set(measured)
    hybrid = measured["hybrid"]
    assert hybrid["filebeat.max_backoff"] <= hybrid["filebeat.scan_frequency"] == 0.01
