"""An agent off loopback (127.0.1.1) over TLS with a CA made in the test (trustme), and the controller's
client of it: the right CA works end to end; a wrong CA, an expired certificate, a missing and a wrong
token are each refused naming the node. Binding off loopback without TLS is refused unless --insecure-http."""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import trustme
import yaml
from typer.testing import CliRunner

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.runtimes import ProcessRuntime
from agents.service import build_components, create_app
from api.server import serve_in_thread
from cli.main import app as pipetune
from controller.deployment import load_deployment, live_pipeline
from controller.pipelines import PipelineUnavailable
from models.space import PIPELINE_SPACE
from tests.agents.conftest import TOKEN, write_wrapper
from tests.conftest import FixedTelemetry

HOST = "127.0.1.1"  # loopback on Linux, but not 127.0.0.1: the agent must treat it as off loopback


def _free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _agent_config(tmp_path: Path, port: int) -> AgentConfig:
    """One Kafka producer component whose process is a stand-in that only sleeps (no broker runs here)."""
    config_dir = tmp_path / "replay"
    wrapper = write_wrapper(config_dir)
    (config_dir / "producer.properties").write_text("# the operator's producer settings\n")
    return AgentConfig.model_validate({
        "state_dir": str(tmp_path / "state"), "host": HOST, "port": port, "health_timeout_s": 5, "settle_s": 0.5,
        "supervise_interval_s": 600,
        "components": [{"name": "replay", "kind": "kafka-producer",
                        "properties": str(config_dir / "producer.properties"),
                        "params": {"kafka.producer.linger.ms": 2},
                        "runtime": {"argv": ["/bin/sh", str(wrapper), "sleep", "600"]}}]})


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_agent(tmp_path: Path, ca: trustme.CA) -> Iterator[str]:
    """An agent served over TLS on 127.0.1.1 with a certificate of `ca`; yields its https URL."""
    port = _free_port()
    config = _agent_config(tmp_path, port)
    components = build_components(config)
    cert = ca.issue_cert(HOST)
    cert_file, key_file = tmp_path / "agent.pem", tmp_path / "agent.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    server = serve_in_thread(create_app(config, TOKEN, components), HOST, port,
                             ssl_certfile=str(cert_file), ssl_keyfile=str(key_file))
    try:
        yield f"https://{HOST}:{port}"
    finally:
        server.should_exit = True
        for component in components.values():
            if isinstance(component.runtime, ProcessRuntime):
                component.runtime.stop()


def _deployment_file(tmp_path: Path, url: str, ca_file: Path, token: str = TOKEN) -> Path:
    (tmp_path / "node1.token").write_text(token + "\n")
    (tmp_path / "node1.token").chmod(0o600)
    doc = {"name": "ops", "nodes": [{"name": "node1", "agent_url": url, "token_file": "node1.token",
                                      "ca_file": str(ca_file)}],
           "kafka": {"bootstrap": "127.0.0.1:9", "consumer_group": "shop"},
           "prometheus": {"url": "http://127.0.0.1:9"}, "latency": {"source": "event_time"}}
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_right_ca_works_end_to_end_through_a_deployment_file(tls_agent, tmp_path, ca):
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    deployment = load_deployment(_deployment_file(tmp_path, tls_agent, tmp_path / "ca.pem"))
    pipeline = live_pipeline(deployment)
    pipeline.telemetry = FixedTelemetry()
    try:
        before = pipeline.current()
        assert before["kafka.producer.linger.ms"] == 2
        report = pipeline.apply(PIPELINE_SPACE.config({"kafka.producer.linger.ms": 5}, base=before))
        assert report.ok and report.message == "replay restarted"
        assert pipeline.current()["kafka.producer.linger.ms"] == 5
    finally:
        pipeline.close()


def _refusal(url: str, token: str, ca_file: Path) -> str:
    pipeline = live_pipeline(load_deployment(_deployment_file(ca_file.parent, url, ca_file, token)))
    with pytest.raises(PipelineUnavailable) as caught:
        pipeline.current()
    pipeline.close()
    return str(caught.value)


def test_a_wrong_ca_is_refused_naming_the_node(tls_agent, tmp_path):
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    message = _refusal(tls_agent, TOKEN, tmp_path / "other-ca.pem")
    assert message.startswith(f"node node1: agent at {tls_agent}: TLS certificate not accepted (")
    assert "ca_file" in message


def test_an_expired_certificate_is_refused(tmp_path, ca):
    port = _free_port()
    config = _agent_config(tmp_path, port)
    components = build_components(config)
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    cert = ca.issue_cert(HOST, not_before=past - datetime.timedelta(days=30), not_after=past)
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "agent.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "agent.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server = serve_in_thread(create_app(config, TOKEN, components), HOST, port,
                             ssl_certfile=str(tmp_path / "agent.pem"), ssl_keyfile=str(tmp_path / "agent.key"))
    try:
        message = _refusal(f"https://{HOST}:{port}", TOKEN, tmp_path / "ca.pem")
        assert "TLS certificate not accepted (certificate has expired)" in message and "node node1" in message
    finally:
        server.should_exit = True
        for component in components.values():
            component.runtime.stop()


@pytest.mark.parametrize("token,status", [("", 401), ("not-the-token", 403)])
def test_a_missing_or_wrong_token_is_refused_naming_the_node(tls_agent, tmp_path, ca, token, status):
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    message = _refusal(tls_agent, token, tmp_path / "ca.pem")
    assert message.startswith(f"node node1: agent answered {status}: the agent of node1 ({tls_agent}) refused the token")
    with AgentClient(tls_agent, token, tmp_path / "ca.pem", node="node1") as client, pytest.raises(AgentError):
        client.components()


def _cli_agent_config(tmp_path: Path) -> Path:
    config = _agent_config(tmp_path, _free_port())
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (tmp_path / "token").write_text(TOKEN)
    return path


def test_off_loopback_without_tls_is_refused_with_exit_2(tmp_path):
    result = CliRunner().invoke(pipetune, ["agent", "--config", str(_cli_agent_config(tmp_path)),
                                           "--token-file", str(tmp_path / "token")])
    assert result.exit_code == 2
    assert "needs TLS: give --tls-cert and --tls-key, or accept plain HTTP with --insecure-http" in result.output


@pytest.mark.slow
def test_off_loopback_with_insecure_http_serves_and_warns(tmp_path):
    config = _cli_agent_config(tmp_path)
    port = yaml.safe_load(config.read_text())["port"]
    agent = subprocess.Popen([sys.executable, "-m", "cli", "agent", "--config", str(config), "--token-file",
                              str(tmp_path / "token"), "--insecure-http"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with AgentClient(f"http://{HOST}:{port}", TOKEN, timeout_s=5) as client:
                    components = client.components()
                break
            except httpx.TransportError:
                assert agent.poll() is None and time.monotonic() < deadline, "the agent did not serve"
                time.sleep(0.2)
        assert [c["name"] for c in components] == ["replay"]
    finally:
        agent.terminate()
        _, stderr = agent.communicate(timeout=30)
        _stop_stand_in(tmp_path)
    assert f"WARNING: serving plain HTTP on {HOST}, off loopback (--insecure-http)" in stderr


def _stop_stand_in(tmp_path: Path) -> None:
    """The stand-in producer the agent started outlives it: stop it by the pid its runtime recorded."""
    config = AgentConfig.model_validate(yaml.safe_load((tmp_path / "agent.yaml").read_text()))
    for component in build_components(config).values():
        component.runtime.stop()
