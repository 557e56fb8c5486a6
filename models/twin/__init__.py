"""The pipeline twin: a discrete-event model of file -> Filebeat -> Logstash -> Kafka -> sink.

Each module's docstring lists the semantics it models and their source; `docs/twin.md` says what is
left out and where the twin disagrees with the paper. Entry points: `Twin` (window by window, config
changes between windows) and `simulate` (one run). Cost coefficients come from a `Calibration`.
"""

from models.twin.calibration import Calibration, available, load
from models.twin.twin import STAGES, Twin, simulate, steady_arrivals

__all__ = ["Calibration", "STAGES", "Twin", "available", "load", "simulate", "steady_arrivals"]
