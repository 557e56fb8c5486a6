"""The agent changing Filebeat in a container of a real dockerd (image made by `docker import`), its
config directory bind-mounted: a restart through the docker SDK, and a rollback when it dies."""

from __future__ import annotations

import pytest
import yaml

from agents.service import build_components
from tests.agents.conftest import filebeat_agent_config

pytestmark = pytest.mark.slow


def test_filebeat_in_a_container_restarts_on_a_queue_change_and_is_rolled_back_when_it_dies(
        docker_engine, filebeat_image, installed, tmp_path):
    runtime = {"kind": "docker", "container": "pipetune-fb-test", "docker_host": docker_engine.base_url,
               "stop_timeout_s": 5}
    config = filebeat_agent_config(tmp_path, installed.filebeat, runtime=runtime)
    config_dir = config.components[0].config.parent
    client = docker_engine.client()
    container = client.containers.create(
        filebeat_image, ["/bin/sh", str(config_dir / "run.sh"), "/usr/share/filebeat/filebeat",
                         "-c", str(config_dir / "filebeat.yml"), "--path.home", str(config_dir)],
        name="pipetune-fb-test", network_mode="host",
        volumes={str(config_dir): {"bind": str(config_dir), "mode": "rw"}})
    try:
        fb = build_components(config)["filebeat"]
        fb.start()  # writes version 0 and starts the container
        container.reload()
        assert container.status == "running" and fb.adapter.health().ok
        started_at = container.attrs["State"]["StartedAt"]

        result = fb.change(1, {"filebeat.queue.mem.events": 8192})
        assert (result.status, result.action) == ("applied", "restarted")
        container.reload()
        assert container.attrs["State"]["StartedAt"] != started_at
        assert yaml.safe_load((config_dir / "filebeat.yml").read_text())["queue.mem"]["events"] == 8192

        in_force = (config_dir / "filebeat.yml").read_text()
        (config_dir / "crash-next").touch()  # the next container start exits at once
        died = fb.change(2, {"filebeat.queue.mem.events": 16384})
        assert died.status == "rolled_back" and died.version == 1 and "not running" in died.message
        container.reload()
        assert container.status == "running" and fb.adapter.health().ok
        assert (config_dir / "filebeat.yml").read_text() == in_force
        assert fb.state()["runtime"]["status"] == "running"
    finally:
        container.remove(force=True)
        client.close()
