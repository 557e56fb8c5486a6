"""bench.convergence's figures from a decision log: when the search came near and stopped, and what it changed
after (a run of the twin is in the benchmark itself, too long for a test)."""

from bench.convergence import across_seeds, change_causes, convergence
from controller.state import Action, Decision


def _decision(window: int, p95_s: float, reason: str, changed: bool, offered_eps: float = 300.0) -> Decision:
    return Decision(window=window, t_s=30.0 * window, config={}, observed={"p95_s": p95_s, "offered_eps": offered_eps},
                    action=Action.EXPLORE if changed else Action.HOLD, reason=reason,
                    change={"filebeat.backoff": [1, 2]} if changed else {})


def test_changes_are_counted_after_the_near_window_and_after_the_first_convergence():
    log = [_decision(0, 2.0, "optimistic gain", True), _decision(1, 1.05, "optimistic gain", True),
           _decision(2, 1.0, "converged: best predicted gain", False),
           _decision(3, 1.0, "re-opened (load moved 300 → 450 ev/s); predicted gain", True, 450.0),
           _decision(4, 1.0, "converged: best predicted gain", False, 450.0)]
    figures = convergence(log, final_p95_s=1.0)
    assert figures["near_window"] == 1 and figures["changes_after_near"] == 1 and figures["changes"] == 3
    assert round(figures["changes_per_100_after_near"], 1) == 33.3  # 1 change in the 3 windows after window 1
    assert figures["first_converged_window"] == 2 and figures["changes_after_converged"] == 1
    causes = [row["cause"] for row in change_causes(log)]
    assert causes == ["initial search", "initial search", "re-opened: load moved 300 → 450 ev/s"]


def test_a_run_that_never_converged_says_so():
    log = [_decision(0, 2.0, "optimistic gain", True), _decision(1, 1.0, "optimistic gain", True)]
    figures = convergence(log, final_p95_s=1.0)
    assert figures["first_converged_window"] is None and figures["changes_after_converged"] is None


def test_seeds_are_summed_up_per_case_a_run_that_never_came_near_counting_as_not_calm():
    rows = [{"case": "a / steady", "seed": 0, "changes_after_near": 0, "final_p95_s": 2.0},
            {"case": "a / steady", "seed": 1, "changes_after_near": 3, "final_p95_s": 1.0},
            {"case": "a / steady", "seed": 2, "changes_after_near": None, "final_p95_s": 4.0},
            {"case": "b / diurnal", "seed": 0, "changes_after_near": 2, "final_p95_s": 0.5}]
    summary = {row["case"]: row for row in across_seeds(rows)}
    assert summary["a / steady"] == {"case": "a / steady", "seeds": 3, "calm": 1, "median_final_p95_s": 2.0,
                                     "worst_final_p95_s": 4.0}
    assert summary["b / diurnal"]["calm"] == 1 and list(summary) == ["a / steady", "b / diurnal"]
