"""A window's cost as people read it: CPU as a share of one core, requests into Kafka per second, bytes.

The figures are `controller.state.Cost`'s keys, as the decision log's `observed`, the status and the fresh
windows hold them; a figure nothing measured (None, or absent from a log written before costs were) reads "–".
"""

from __future__ import annotations

import math
from typing import Any, Mapping

# The shippers pipetune tunes on each node; a pool's several nodes name theirs `filebeat-node-2`, ...
SHIPPERS = ("filebeat", "logstash")
UNKNOWN = "–"


def shipper_cores(cpu_cores: Mapping[str, float] | None) -> float | None:
    """CPU seconds per second of every shipper in `cpu_cores` together; None when none of them was measured."""
    shipped = [cores for part, cores in (cpu_cores or {}).items() if part.split("-", 1)[0] in SHIPPERS]
    return sum(shipped) if shipped else None


def core_share(cores: float | None) -> str:
    """CPU seconds per second as a share of one core: 0.061 → "6.1%" (a busy shipper may pass 100%)."""
    return UNKNOWN if cores is None or not math.isfinite(cores) else f"{cores * 100:.1f}%"


def per_second(rate: float | None) -> str:
    """A rate as a whole number: 44.2 → "44"."""
    return UNKNOWN if rate is None or not math.isfinite(rate) else f"{rate:.0f}"


def byte_rate(rate: float | None) -> str:
    """Bytes per second in binary units: 240000 → "234 KiB/s"."""
    if rate is None or not math.isfinite(rate):
        return UNKNOWN
    for unit in ("B", "KiB"):
        if rate < 1024:
            return f"{rate:.0f} {unit}/s"
        rate /= 1024
    return f"{rate:.1f} MiB/s"


def cost_text(cost: Mapping[str, Any]) -> str:
    """Every figure of a cost on one line, for `pipetune status`."""
    cpu = cost.get("cpu_cores") or {}
    parts = [", ".join(f"{part} {core_share(cores)}" for part, cores in sorted(cpu.items())) + " of a core"
             if cpu else "CPU not measured"]
    share = cost.get("busiest_cpu_share")
    if share is not None and math.isfinite(share):
        parts.append(f"busiest node {share:.0%} of its cores")
    requests, bytes_in = cost.get("produce_requests_per_s"), cost.get("kafka_bytes_in_per_s")
    parts.append(f"into Kafka {per_second(requests)} Produce req/s, {byte_rate(bytes_in)}"
                 if requests is not None or bytes_in is not None else "into Kafka: not measured")
    return "; ".join(parts)
