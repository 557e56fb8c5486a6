"""bench.fleet's pure parts on a recorded run: which step judged what, the figures, the 80-column table."""

from __future__ import annotations

import math

import pytest

from bench.fleet import Rollout, canary_outcome, plot_node, summarise, table


def _step(t_s: float, action: str, outcome: str | None) -> dict:
    return {"t_s": t_s, "window": 0, "action": action, "outcome": outcome, "judgement": "", "p95_s": 1.0,
            "change": {}, "version": 0}


def _recorded(**changes: object) -> dict:
    """A small run as fleet.json records it: two nodes, two rounds of fresh windows (ABBA)."""
    fresh = [{"config": c, "round": r, "node": n, "p95_s": p, "events": 100, "received": 100, "lost": 0}
             for c, r, n, p in [("defaults", 1, "node-1", 2.0), ("final", 1, "node-1", 0.20),
                                ("final", 2, "node-1", 0.30), ("defaults", 2, "node-1", 3.0),
                                ("defaults", 1, "node-2", 4.0), ("final", 1, "node-2", 0.5),
                                ("final", 2, "node-2", 0.5), ("defaults", 2, "node-2", 4.0)]]
    return {"traffic": {"node-1": "shop users, steady 500 ev/s", "node-2": "access-log arrivals (trace) x3"},
            "tune": {"began": 0.0, "ended": 1260.0, "rollbacks": 1,
                     "steps": [_step(60, "explore", None), _step(150, "explore", "promoted"),
                               _step(300, "explore", "worse"), _step(420, "remeasure", "unclear"),
                               _step(500, "rollback", None), _step(600, "explore", "promoted")]},
            "fresh": fresh, "ledger": {"node-1": {"expected": 1000, "lost": 0, "duplicates": 7},
                                       "node-2": {"expected": 500, "lost": 3, "duplicates": 0}},
            "canaries": {"node-1": {"received": 2400.0, "lost": 0.0}, "node-2": {"received": 2398.0, "lost": 2.0}},
            "timeline": [{"t_s": 0.0, "p95_s": {"node-1": 2.0, "node-2": 4.0}},
                         {"t_s": 30.0, "p95_s": {"node-1": 0.4}}]} | changes


@pytest.mark.parametrize("before, after, outcome", [
    (Rollout("canary", 3, ""), Rollout("steady", 4, "effect -0.3 s"), "promoted"),
    (Rollout("canary", 3, ""), Rollout("steady", 3, "worse: effect +0.2 s"), "worse"),
    (Rollout("canary", 3, ""), Rollout("canary", 3, "unclear: interval spans 0"), "unclear"),  # and a new canary
    (Rollout("steady", 3, "worse: old"), Rollout("canary", 3, "worse: old"), None),  # a candidate applied
    (Rollout("steady", 3, ""), Rollout("steady", 4, ""), None),  # a known config to every node
    (Rollout("canary", 3, ""), Rollout("steady", 3, "replaced before it was judged"), None),
])
def test_a_step_is_counted_by_what_it_judged(before, after, outcome):
    assert canary_outcome(before, after) == outcome


def test_the_summary_takes_the_median_of_the_fresh_rounds_and_counts_every_loss():
    summary = summarise(_recorded())
    one, two = summary["nodes"]["node-1"], summary["nodes"]["node-2"]
    assert (one["p95_before_s"], one["p95_after_s"]) == (2.5, 0.25)
    assert one["before_over_after"] == pytest.approx(10.0)
    assert (two["lost_events"], two["events"], two["canaries_lost"]) == (3, 900, 2.0)
    assert (summary["promoted"], summary["worse"], summary["unclear"], summary["rollbacks"]) == (2, 1, 1, 1)
    assert (summary["lost_events"], summary["canaries_lost"], summary["decisions"]) == (3, 2.0, 6)
    assert (summary["duplicates"], summary["remeasures"]) == (7, 1)
    assert summary["tune_minutes"] == 21.0


def test_a_node_with_no_fresh_latency_shows_nan_not_a_crash():
    recorded = _recorded()
    recorded["fresh"] = [r for r in recorded["fresh"] if not (r["node"] == "node-2" and r["config"] == "final")]
    node = summarise(recorded)["nodes"]["node-2"]
    assert math.isnan(node["p95_after_s"]) and math.isnan(node["before_over_after"])


def test_the_table_fits_80_columns_and_shows_the_figures():
    text = table(summarise(_recorded()))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "node-1" in text and "2.500s" in text and "0.250s" in text and "10.0" in text
    assert "6 decisions: 2 promoted, 1 rollbacks" in text and "canary rejected: 1 worse, 1 unclear" in text
    assert "canary rejected: 1 worse, 1 unclear; 1 re-measures" in text
    assert "events lost 3 of 2300 (goal 0), 7 duplicated" in text and "canaries lost 2 of 4800 (goal 0)" in text


def test_each_node_gets_a_plot(tmp_path):
    recorded = _recorded()
    for node in ("node-1", "node-2"):
        plot_node(recorded, node, tmp_path / f"{node}.png")
        assert (tmp_path / f"{node}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
