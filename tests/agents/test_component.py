"""A managed component over an operator's own filebeat.yml (`agents.component`), with a stand-in Filebeat: the
first version writes nothing the operator did not have, and no write (a change, a rollback, a restart of a stopped
component, the agent's start) erases what the operator edited since; a tuned key edited by hand is held, never
overwritten. Real Filebeat does the same in tests/agents/filebeat/test_adapter.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.adapter import ConfigStore, Version
from agents.component import ChangeRefused, ManagedComponent
from agents.filebeat.adapter import FilebeatAdapter
from agents.filebeat.patch import InputSelector

OPERATOR = """\
# web tier: written by the platform team, not by pipetune
filebeat.inputs:
  # nginx access log, JSON
  - type: filestream
    id: access
    paths: [/var/log/nginx/access.log*]
    parsers:
      - ndjson:
          target: ""
  - type: filestream
    id: errors
    paths: [/var/log/nginx/error.log]

processors:
  - add_host_metadata: ~

output.kafka:
  hosts: ["k1:9092"]
  topic: web
  compression: gzip
"""


class StandIn:
    """Filebeat's process as the agent sees it: running or not, and what its config held when it (re)started."""

    def __init__(self, config: Path) -> None:
        self.config, self.up, self.started_on = config, False, []

    def reload(self) -> None: ...

    def restart(self) -> None:
        self.up = True
        self.started_on.append(self.config.read_text())

    def stop(self) -> None:
        self.up = False

    def running(self) -> bool:
        return self.up


def _component(tmp_path: Path, runtime: StandIn, initial: dict | None = None) -> ManagedComponent:
    binary = tmp_path / "filebeat"  # `filebeat test config` always passes: Filebeat's own check is not the subject
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    adapter = FilebeatAdapter(runtime.config, [InputSelector(id="access")], binary, runtime=runtime)
    return ManagedComponent(adapter, runtime, ConfigStore(tmp_path / "state", "filebeat"), initial or {}, settle_s=0)


@pytest.fixture
def node(tmp_path: Path) -> tuple[ManagedComponent, StandIn]:
    config = tmp_path / "filebeat.yml"
    config.write_text(OPERATOR)
    runtime = StandIn(config)
    component = _component(tmp_path, runtime)
    component.start()
    return component, runtime


def _events(component: ManagedComponent) -> list[str]:
    return [entry["event"] for entry in component.audit()]


def test_the_first_version_writes_nothing_and_reports_what_filebeat_reads(node):
    """Issue 39: the first start wrote the log input's `backoff.init: 1s` and `close.on_state_change.inactive:
    300s` into a filestream input, and reported `filebeat.backoff 1` as its start."""
    component, runtime = node
    assert runtime.config.read_text() == OPERATOR and runtime.started_on == [OPERATOR]
    params = component.state()["params"]
    assert params["filebeat.backoff"] == 2.0  # filestream's own default (filestream/config.go), not the log input's 1s
    assert (params["filebeat.scan_frequency"], params["filebeat.max_backoff"]) == (10.0, 10.0)
    # Filebeat's filestream never closes an idle file where the input sets nothing (0s): no value pipetune
    # tunes, so the key is left alone rather than written.
    assert "filebeat.close_inactive" not in component.state()["params_allowed"]
    assert component.audit()[-1]["wrote"] == []


def test_a_change_writes_only_its_own_keys(node):
    component, runtime = node
    assert component.change(1, {"filebeat.max_backoff": 4.0}).status == "applied"
    changed = [line for line in runtime.config.read_text().splitlines() if line not in OPERATOR.splitlines()]
    assert changed == ["    backoff.max: 4s"]


def _edit(runtime: StandIn, old: str, new: str) -> str:
    text = runtime.config.read_text().replace(old, new)
    runtime.config.write_text(text)
    return text


def test_a_restart_after_an_operators_edit_keeps_it_and_rewrites_nothing(node):
    component, runtime = node
    component.change(1, {"filebeat.max_backoff": 4.0})
    edited = _edit(runtime, "  compression: gzip\n", "  compression: gzip\n  max_message_bytes: 2000000  # big\n")
    runtime.stop()  # the operator restarts Filebeat to load the edit; the agent's supervisor finds it stopped
    assert component.keep_running()
    assert runtime.config.read_text() == edited and runtime.started_on[-1] == edited
    assert component.audit()[-1] | {"at": 0} == {"at": 0, "event": "restarted", "version": 1,
                                                 "reason": "found not running", "files": "as they are"}


def test_a_tuned_key_edited_by_hand_is_held_with_its_line_and_never_overwritten(node):
    component, runtime = node
    component.change(1, {"filebeat.max_backoff": 4.0})
    edited = _edit(runtime, "backoff.max: 4s", "backoff.max: 3s")
    runtime.stop()
    assert component.keep_running()  # Filebeat runs again, on the operator's file as it is
    assert runtime.config.read_text() == edited and runtime.started_on[-1] == edited
    [held] = [entry for entry in component.audit() if entry["event"] == "held"]
    assert f"{runtime.config}:10 backoff.max is 3s on disk" in held["reason"] and held["during"] == "found not running"
    assert "backoff.max" in component.state()["held"]
    with pytest.raises(ChangeRefused) as refused:
        component.change(2, {"filebeat.backoff": 0.5})
    assert refused.value.status == 409 and "backoff.max is 3s on disk" in str(refused.value)
    assert runtime.config.read_text() == edited
    _edit(runtime, "backoff.max: 3s", "backoff.max: 4s")  # the operator puts it back: the agent goes on
    assert component.change(2, {"filebeat.backoff": 0.5}).status == "applied"
    assert component.state()["held"] is None


def test_a_rollback_keeps_the_operators_edit_and_is_refused_over_a_tuned_key_edited_by_hand(node):
    component, runtime = node
    component.change(1, {"filebeat.max_backoff": 4.0})
    component.change(2, {"filebeat.max_backoff": 8.0, "filebeat.queue.mem.flush.timeout": 0.1})
    _edit(runtime, "processors:\n", "processors:\n  - drop_fields: {fields: [agent]}\n")
    assert component.rollback().version == 1
    text = runtime.config.read_text()
    assert "  - drop_fields: {fields: [agent]}\n" in text and "backoff.max: 4s" in text
    assert "flush.timeout: 1s" in text  # written back as Filebeat's default: the rebase makes the key explicit
    edited = _edit(runtime, "backoff.max: 4s", "backoff.max: 1s")
    with pytest.raises(ChangeRefused) as refused:
        component.rollback()
    assert refused.value.status == 409 and "backoff.max is 1s on disk" in str(refused.value)
    assert runtime.config.read_text() == edited and component.state()["version"] == 1
    assert _events(component)[-1] == "held"


def test_an_agent_that_starts_and_finds_filebeat_stopped_keeps_the_operators_edit(node, tmp_path):
    component, runtime = node
    component.change(1, {"filebeat.max_backoff": 4.0})
    runtime.stop()  # the agent and Filebeat stopped; the operator edits meanwhile
    edited = _edit(runtime, "topic: web\n", "topic: web-v2\n")
    again = _component(tmp_path, runtime)
    again.start()
    assert runtime.config.read_text() == edited and runtime.started_on[-1] == edited
    assert _events(again)[-1] == "restarted" and again.audit()[-1]["reason"] == "not running at agent start"


def test_a_change_interrupted_by_the_agents_death_is_undone_key_by_key(node, tmp_path):
    component, runtime = node
    component.change(1, {"filebeat.max_backoff": 4.0})
    # Version 2 was written, then the agent died before it was in force; the operator edited meanwhile.
    component.store.put(Version(2, {**component.store.get(1).params, "filebeat.max_backoff": 5.0}, 1))
    component.store.set_pending(2)
    edited = _edit(runtime, "backoff.max: 4s", "backoff.max: 5s").replace("topic: web\n", "topic: web-v2\n")
    runtime.config.write_text(edited)
    again = _component(tmp_path, runtime)
    again.start()
    assert runtime.config.read_text() == edited.replace("backoff.max: 5s", "backoff.max: 4s")
    assert again.state()["version"] == 1


def test_a_change_out_of_filebeats_backoff_order_is_refused_naming_both_keys_and_touches_nothing(node):
    """Issue 39: both final configs broke Filebeat's backoff.init <= backoff.max <= check_interval, which `filebeat
    test config` does not check."""
    component, runtime = node
    before = (runtime.config.read_text(), list(runtime.started_on))
    for version, changes, low, high in [(1, {"filebeat.max_backoff": 55.8}, "filebeat.max_backoff",
                                         "filebeat.scan_frequency"),  # above check_interval (10 s)
                                        (1, {"filebeat.max_backoff": 1.0}, "filebeat.backoff", "filebeat.max_backoff")]:
        with pytest.raises(ChangeRefused) as refused:
            component.change(version, changes)
        assert refused.value.status == 422
        assert (refused.value.detail["field"], refused.value.detail["other"]) == (low, high)
        assert f"{low}=" in str(refused.value) and f"{high}=" in str(refused.value)
    assert (runtime.config.read_text(), runtime.started_on) == before and component.state()["version"] == 0
    assert component.change(1, {"filebeat.max_backoff": 1.0, "filebeat.backoff": 0.5}).status == "applied"


def test_an_order_the_operators_file_already_breaks_is_theirs_until_a_change_touches_it(tmp_path):
    config = tmp_path / "filebeat.yml"
    config.write_text(OPERATOR.replace("    id: access\n", "    id: access\n    prospector.scanner.check_interval: 1s\n",
                                       1))
    runtime = StandIn(config)
    component = _component(tmp_path, runtime)
    component.start()  # backoff.max (10 s by default) above check_interval: the operator's, taken as it is
    assert component.change(1, {"filebeat.queue.mem.flush.timeout": 0.1}).status == "applied"
    with pytest.raises(ChangeRefused) as refused:
        component.change(2, {"filebeat.max_backoff": 5.0})
    assert refused.value.detail["other"] == "filebeat.scan_frequency"
    assert component.change(2, {"filebeat.max_backoff": 1.0, "filebeat.backoff": 0.5}).status == "applied"
