"""A single-node Kafka broker in KRaft mode from the cached Maven Central jars, and its topics."""

from __future__ import annotations

import base64
import secrets
import subprocess
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from models.space import Config
from testbed.install import require_tool
from testbed.pipeline import PipelineSpec
from testbed.processes import Service, TestbedError

_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaConfig=WARN
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


def render_server_properties(spec: PipelineSpec, config: Config, data_dir: Path) -> str:
    """server.properties for one combined broker+controller on loopback."""
    port, cport = spec.kafka.port, spec.kafka.controller_port
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Topics are created before any event flows: auto-creation lost the first message in a trial.
        "auto.create.topics.enable": "false",
        "num.io.threads": str(config["kafka.broker.num.io.threads"]),
        "num.network.threads": str(config["kafka.broker.num.network.threads"]),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def kafka_service(spec: PipelineSpec, libs: Path, config: Config) -> Service:
    """Write the broker's config (formatting its storage once) and describe its process."""
    java = require_tool("java", "to run the Kafka broker (apt-get install default-jre-headless)")
    home = spec.resolved_run_dir() / "kafka"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.write_text(render_server_properties(spec, config, data))
    (home / "log4j.properties").write_text(_LOG4J)
    classpath = f"{libs}/*"
    if not (data / "meta.properties").exists():
        _format_storage(java, home, classpath, props)
    heap = f"{spec.kafka.heap_mb}m"
    argv = (java, "-Xms256m", f"-Xmx{heap}", f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
            "-cp", classpath, "kafka.Kafka", str(props))
    return Service("kafka", argv, spec.resolved_run_dir())


def _format_storage(java: str, home: Path, classpath: str, props: Path) -> None:
    # Keep the cluster id: formatting an already formatted dir with another id fails.
    id_file = home / "cluster-id"
    while not id_file.exists() or id_file.read_text().startswith("-"):
        # An id starting with "-" reads as an option to the storage tool (Kafka's own ids never do).
        id_file.write_text(base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("="))
    proc = subprocess.run([java, "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool", "format",
                           "--ignore-formatted", "-t", id_file.read_text().strip(), "-c", str(props)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise TestbedError(f"formatting Kafka's storage in {home} failed:\n{proc.stdout}{proc.stderr}")


def broker_ready(bootstrap: str) -> bool:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000, client_id="pipetune-testbed")
    try:
        return bool(admin.describe_cluster()["brokers"])
    finally:
        admin.close()


def create_topics(spec: PipelineSpec) -> list[str]:
    """Create the pipeline's topics (those that already exist are left as they are); returns all names."""
    admin = KafkaAdminClient(bootstrap_servers=spec.bootstrap, client_id="pipetune-testbed")
    try:
        for topic in spec.kafka.topics:
            try:
                admin.create_topics([NewTopic(topic.name, topic.partitions, 1, topic_configs=dict(topic.configs))])
            except TopicAlreadyExistsError:
                pass
        return [t.name for t in spec.kafka.topics]
    finally:
        admin.close()

