"""The named presets, as the components take them."""

from models.presets import PRESETS, preset, preset_as_taken
from models.space import check_rules


def test_every_preset_is_taken_by_the_agents_once_its_unset_values_are_in_order():
    for name in PRESETS:
        config, moved = preset_as_taken(name)
        check_rules(config)  # an agent refuses a config that breaks a component's order rule
        assert not set(moved) & set(PRESETS[name])  # what the preset sets is what it is
        assert all(preset(name)[k] == written and config[k] == kept for k, (written, kept) in moved.items())


def test_values_the_operator_sets_on_top_of_a_preset_are_kept_not_moved():
    config, moved = preset_as_taken("hybrid", {"filebeat.backoff": 0.005})
    assert config["filebeat.backoff"] == 0.005 and config["filebeat.scan_frequency"] == 0.01
    assert moved == {"filebeat.max_backoff": (10.0, 0.01)}
    assert preset_as_taken("defaults") == (preset("defaults"), {})
