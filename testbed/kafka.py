"""The testbed's Kafka from the cached Maven Central jars: one broker, or a cluster of up to five, in KRaft
mode (each broker also a controller, all of them the quorum's voters), and its topics, replicated
min(3, brokers) times with `min.insync.replicas` min(2, brokers).

Each broker exports what a window costs it (Produce requests, bytes in, its process's CPU) through the Prometheus
JMX exporter's java agent, once installed, on a free port of the broker's loopback address; the port is kept
beside the broker's config (`broker_metrics_port`) for Prometheus's scrape config."""

from __future__ import annotations

import base64
import secrets
import socket
import subprocess
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from models.space import Config
from testbed.install import jmx_exporter_jar, require_tool
from testbed.pipeline import BrokerLayout, PipelineSpec
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


EXPORTER_RULES = Path(__file__).resolve().parent / "jmx-exporter" / "kafka-broker.yaml"


def render_server_properties(spec: PipelineSpec, broker: BrokerLayout, config: Config) -> str:
    """server.properties for one combined broker+controller on loopback, a voter of the cluster's quorum."""
    voters = ",".join(f"{b.node_id}@{b.host}:{b.controller_port}" for b in spec.broker_layouts())
    copies, min_isr = str(spec.replication_factor), str(spec.min_insync_replicas)
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(broker.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{broker.host}:{broker.port},CONTROLLER://{broker.host}:{broker.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{broker.host}:{broker.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(broker.home / "data"),
        "num.partitions": "1",
        "default.replication.factor": copies,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": copies,
        "transaction.state.log.replication.factor": copies,
        "transaction.state.log.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        # Topics are created before any event flows: auto-creation lost the first message in a trial.
        "auto.create.topics.enable": "false",
        "num.io.threads": str(config["kafka.broker.num.io.threads"]),
        "num.network.threads": str(config["kafka.broker.num.network.threads"]),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def kafka_services(spec: PipelineSpec, libs: Path, config: Config) -> list[Service]:
    """Write each broker's config (formatting its storage once, every broker with the cluster's one id) and
    describe its process."""
    java = require_tool("java", "to run the Kafka broker (apt-get install default-jre-headless)")
    classpath = f"{libs}/*"
    kafka_dir = spec.resolved_run_dir() / "kafka"
    kafka_dir.mkdir(parents=True, exist_ok=True)
    log4j = kafka_dir / "log4j.properties"
    log4j.write_text(_LOG4J)
    services = []
    for broker in spec.broker_layouts():
        broker.home.mkdir(parents=True, exist_ok=True)
        props = broker.home / "server.properties"
        props.write_text(render_server_properties(spec, broker, config))
        if not (broker.home / "data" / "meta.properties").exists():
            _format_storage(java, kafka_dir, classpath, props)
        argv = (java, "-Xms256m", f"-Xmx{spec.kafka.heap_mb}m", f"-Dlog4j.configuration=file:{log4j}",
                *_exporter_options(broker), "-cp", classpath, "kafka.Kafka", str(props))
        services.append(Service(broker.service_name, argv, spec.resolved_run_dir()))
    return services


def _metrics_port_file(broker: BrokerLayout) -> Path:
    return broker.home / "metrics.port"


def broker_metrics_port(broker: BrokerLayout) -> int | None:
    """The port the broker's JMX exporter listens on (on the broker's address); None: it runs without one."""
    try:
        return int(_metrics_port_file(broker).read_text())
    except (OSError, ValueError):
        return None


def _exporter_options(broker: BrokerLayout) -> tuple[str, ...]:
    """The JVM option that attaches the JMX exporter (none before it is installed), on a port free now."""
    jar = jmx_exporter_jar()
    if jar is None:
        _metrics_port_file(broker).unlink(missing_ok=True)
        return ()
    with socket.socket() as sock:
        sock.bind((broker.host, 0))
        port = sock.getsockname()[1]
    _metrics_port_file(broker).write_text(f"{port}\n")
    return (f"-javaagent:{jar}={broker.host}:{port}:{EXPORTER_RULES}",)


def _format_storage(java: str, kafka_dir: Path, classpath: str, props: Path) -> None:
    # Keep the cluster id: formatting an already formatted dir with another id fails, and every broker of
    # the cluster must carry the same one.
    id_file = kafka_dir / "cluster-id"
    while not id_file.exists() or id_file.read_text().startswith("-"):
        # An id starting with "-" reads as an option to the storage tool (Kafka's own ids never do).
        id_file.write_text(base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("="))
    proc = subprocess.run([java, "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool", "format",
                           "--ignore-formatted", "-t", id_file.read_text().strip(), "-c", str(props)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise TestbedError(f"formatting Kafka's storage for {props} failed:\n{proc.stdout}{proc.stderr}")


def brokers_ready(spec: PipelineSpec) -> bool:
    """Whether every broker of the cluster has joined it."""
    admin = KafkaAdminClient(bootstrap_servers=spec.bootstrap, request_timeout_ms=2000, client_id="pipetune-testbed")
    try:
        return len(admin.describe_cluster()["brokers"]) >= spec.brokers
    finally:
        admin.close()


def create_topics(spec: PipelineSpec) -> list[str]:
    """Create the pipeline's topics, replicated as `spec` says (those that already exist are left as they
    are); returns all names."""
    admin = KafkaAdminClient(bootstrap_servers=spec.bootstrap, client_id="pipetune-testbed")
    try:
        for topic in spec.kafka.topics:
            try:
                configs = {"min.insync.replicas": str(spec.min_insync_replicas)} | dict(topic.configs)
                admin.create_topics([NewTopic(topic.name, topic.partitions, spec.replication_factor,
                                              topic_configs=configs)])
            except TopicAlreadyExistsError:
                pass
        return [t.name for t in spec.kafka.topics]
    finally:
        admin.close()

