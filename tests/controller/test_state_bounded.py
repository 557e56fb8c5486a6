"""The state directory of a daemon that runs until stopped stays bounded: the decision log rotates, the
observations are compacted to what the learner keeps."""

import math

from controller.state import OBSERVATIONS_KEPT, Action, Decision, StateStore
from models.observation import Observation
from models.policy import Policy
from models.presets import preset
from models.verdict import judge


def _decision(window: int) -> Decision:
    return Decision(window=window, t_s=30.0 * window, config={"filebeat.backoff": 1.0}, action=Action.HOLD,
                    reason="x" * 200, observed={"p95_s": 0.5})


def test_the_decision_log_rotates_keeps_its_files_and_numbers_every_decision_once(tmp_path):
    store = StateStore(tmp_path, decision_log_bytes=2000, decision_log_files=3)
    for window in range(40):
        store.append_decision(_decision(window))
    names = sorted(p.name for p in tmp_path.glob("decisions*.jsonl"))
    assert names == ["decisions.1.jsonl", "decisions.2.jsonl", "decisions.jsonl"]
    assert all((tmp_path / n).stat().st_size < 2000 + 1000 for n in names)  # a file is full after one line more
    seqs = [d["seq"] for d in store.decisions_newest_first()]
    assert seqs == list(range(39, 39 - len(seqs), -1)) and 0 not in seqs  # the oldest file was dropped
    assert [d["window"] for d in store.decisions()] == sorted(seqs)
    reopened = StateStore(tmp_path, decision_log_bytes=2000, decision_log_files=3)
    assert reopened.logged_decisions() == 40  # a restarted daemon numbers on


def test_a_log_written_before_rotation_numbers_its_lines_from_zero(tmp_path):
    store = StateStore(tmp_path)
    (tmp_path / "decisions.jsonl").write_text("".join(_decision(w).model_dump_json() + "\n" for w in range(3)))
    assert [d["seq"] for d in store.decisions()] == [0, 1, 2]
    store.append_decision(_decision(3))
    assert [d["seq"] for d in store.decisions()] == [0, 1, 2, 3]


def test_observations_are_compacted_to_what_the_learner_keeps(tmp_path):
    store = StateStore(tmp_path)
    config = preset("defaults")
    for i in range(2 * OBSERVATIONS_KEPT + 5):
        p95_s = 0.1 if i == 7 else 1.0 + i / 1000  # window 7 is the best feasible one
        observation = Observation(duration_s=30, offered_eps=300, throughput_eps=300, p50_s=0.5, p95_s=p95_s,
                                  p99_s=2, mean_s=0.5, events_in=9000, events_out=9000)
        store.append_observation(config, 300.0, observation, judge(observation, Policy(), config))
    kept = store.observations()
    assert len(kept) < 2 * OBSERVATIONS_KEPT
    p95s = [observation.p95_s for _, _, observation, _ in kept]
    rest = [p for p in p95s if p != 0.1]
    assert 0.1 in p95s and rest == sorted(rest)  # the best kept, every line in the order it was written
    assert math.isclose(p95s[-1], 1.0 + (2 * OBSERVATIONS_KEPT + 4) / 1000)  # and the newest
