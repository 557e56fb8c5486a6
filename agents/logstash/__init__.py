"""Logstash on a node: its adapter, the patch of pipelines.yml and of a kafka output, and the reader of
Logstash's config language it needs."""
