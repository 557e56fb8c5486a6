"""Kafka on a node: the broker's dynamic configs, and the producer and consumer clients' .properties files."""
