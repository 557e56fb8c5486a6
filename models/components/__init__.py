"""Each component of the pipeline described once (`Component`), and the topologies that chain them."""

from models.components.component import Component, Timer, Topology
from models.components.filebeat import FILEBEAT
from models.components.kafka import KAFKA_BROKER, KAFKA_CONSUMER, KAFKA_PRODUCER
from models.components.logstash import LOGSTASH
from models.components.spark import SPARK_SINK

# In the order their parameters are listed (the search space's order).
COMPONENTS: tuple[Component, ...] = (FILEBEAT, LOGSTASH, KAFKA_BROKER, KAFKA_CONSUMER, KAFKA_PRODUCER, SPARK_SINK)

# Where the events come from ("nginx": the access log they are written to) and what they pass; the paper's Table 3
# stages, or Filebeat shipping straight to Kafka with a consumer or a Spark job as the sink.
TOPOLOGIES: dict[str, Topology] = {
    "paper": Topology("nginx", (("filebeat", FILEBEAT), ("logstash", LOGSTASH), ("kafka", KAFKA_BROKER),
                                ("sink", SPARK_SINK))),
    "filebeat-kafka": Topology("nginx", (("filebeat", FILEBEAT), ("kafka", KAFKA_BROKER), ("sink", KAFKA_CONSUMER))),
    # The paper's pipeline as the testbed runs it (`pipetune testbed up --pipeline paper`): no Logstash.
    "filebeat-kafka-spark": Topology("nginx", (("filebeat", FILEBEAT), ("kafka", KAFKA_BROKER), ("sink", SPARK_SINK))),
}

__all__ = ["COMPONENTS", "TOPOLOGIES", "Component", "Timer", "Topology", "FILEBEAT", "LOGSTASH", "KAFKA_BROKER",
           "KAFKA_CONSUMER", "KAFKA_PRODUCER", "SPARK_SINK"]
