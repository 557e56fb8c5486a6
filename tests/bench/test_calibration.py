"""bench.calibration's configs: each one a node agent takes, so a run measures every row instead of stopping at the
first the agent refuses."""

from bench.calibration import PRESET_NAMES, check_configs
from models.space import check_rules


def test_every_config_the_calibration_checks_is_one_an_agent_takes_the_papers_hybrid_included():
    configs = check_configs()
    assert set(PRESET_NAMES) <= set(configs)
    for config in configs.values():
        check_rules(config)  # raises RuleError, as the agent answers 422
    hybrid = configs["hybrid"]
    assert hybrid["filebeat.scan_frequency"] == 0.01  # the paper's scan, its backoffs lowered to it
    assert hybrid["filebeat.max_backoff"] <= hybrid["filebeat.scan_frequency"]
