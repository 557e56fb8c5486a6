"""The state directory keeps what a resumed run must go on with as its first start set it."""

from controller.state import StateStore
from models.presets import preset
from models.space import PIPELINE_SPACE


def test_a_resumed_run_keeps_the_ceilings_its_first_start_set_whatever_it_resumes_on(tmp_path):
    first = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.5}, base=preset("defaults"))
    assert StateStore(tmp_path).ceilings(first)["filebeat.queue.mem.flush.timeout"] == 0.5
    tuned = PIPELINE_SPACE.config({"filebeat.queue.mem.flush.timeout": 0.004}, base=first)
    resumed = StateStore(tmp_path).ceilings(tuned)
    assert resumed["filebeat.queue.mem.flush.timeout"] == 0.5 and resumed["filebeat.max_backoff"] == 10.0
