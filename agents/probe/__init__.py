"""The end-of-pipeline probe: consumes the pipeline's topic, measures E2E and per-stage latency from
the stamps each component adds, exports Prometheus metrics, and checks every replay run for lost,
duplicated and late events against the run's manifest."""
