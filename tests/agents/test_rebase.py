"""Rebasing a version's tuned keys onto files as they are now (`agents.rebase`): what is rewritten, and a key
changed by hand refused with its file and line."""

import pytest

from agents.rebase import OnDisk, RebaseConflict, to_rewrite

BACKOFF = "filebeat.backoff"


def _key(value, written="1s", where="/etc/filebeat/filebeat.yml:12 backoff.init") -> OnDisk:
    return OnDisk(BACKOFF, where, written, value)


def test_a_key_holding_the_target_is_left_as_it_is_and_one_holding_the_base_is_rewritten():
    held, base = _key(0.05, "50ms"), _key(1.0)
    assert to_rewrite([held, base], {BACKOFF: 0.05}, {BACKOFF: 1.0}) == [base]
    assert to_rewrite([_key(2.0, None)], {BACKOFF: 2.0}, {BACKOFF: 0.5}) == []  # not set: what Filebeat reads


def test_a_key_changed_by_hand_refuses_the_rebase_naming_its_file_line_and_value():
    with pytest.raises(RebaseConflict) as err:
        to_rewrite([_key(1.0), _key(3.0, "3s", "/etc/filebeat/inputs.d/web.yml:7 backoff.init")],
                   {BACKOFF: 0.05}, {BACKOFF: 1.0})
    assert "changed by hand" in str(err.value)
    assert ("/etc/filebeat/inputs.d/web.yml:7 backoff.init is 3s on disk, where the version in force has "
            "filebeat.backoff 1 s") in str(err.value)
    assert "filebeat.yml:12" not in str(err.value)  # the key that holds the base is no conflict


def test_the_first_version_may_replace_any_value():
    key = _key(3.0, "3s")
    assert to_rewrite([key], {BACKOFF: 1.0}, None) == [key]


def test_numbers_compare_as_the_component_reads_them():
    assert to_rewrite([OnDisk("filebeat.queue.mem.events", "f:1 queue.mem.events", "4096", 4096)],
                      {"filebeat.queue.mem.events": 4096.0}, {"filebeat.queue.mem.events": 2048}) == []
    assert to_rewrite([_key(55.800000000000004, "55800ms")], {BACKOFF: 55.8}, {BACKOFF: 1.0}) == []
