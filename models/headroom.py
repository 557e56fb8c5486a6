"""How far a window that kept up was from falling behind: its spare CPU, as the throughput model's margin.

`output_margin` is 0 for every window that keeps up, whatever it had to spare, so the margin model can vouch
only for configs close to ones measured, and the safe set grows a small step a window. The CPU the busiest node
used tells those windows apart: one at half its cores is far from the cliff, one at all of them is on its edge.
So a window that kept up is told the share of the busiest node's cores it left unused, up to `SPARE_MAX`.

The cores are the capacity, not a share learnt from the windows: a twin, whose CPU time counts its slowdown,
keeps up at shares above 1, and a capacity learnt there vouched for spare where there was none and did worse
near capacity (docs/evidence/bench/spare-cpu-run18/ at 23e95b8). A pipeline held back by one thread has less capacity
than its cores: its spare is over-stated, and the windows where it falls behind, told as they are, are what
keeps the model from vouching for configs like them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

SPARE_MAX = 0.3  # no window vouches for more spare capacity than this: beyond it the margin model would
# take a config's neighbourhood for safe far out on one quiet window's word


def spare_margins(cpu_shares: Sequence[float], margins: Sequence[float], floor: float) -> np.ndarray:
    """The margins the throughput model learns: each window's `output_margin` plus the share of the busiest
    node's cores it left unused (`cpu_shares`: its CPU time over its cores; nan where unknown: nothing), up to
    `SPARE_MAX`. The spare counts in full for a window that kept up entirely, and less the closer its own margin
    came to the policy's `floor`: the best configs fall a hair short in most windows (events in flight at the
    window's edges), and a window on the floor fell behind whatever the CPU did."""
    share, margin = np.asarray(cpu_shares, dtype=float), np.asarray(margins, dtype=float)
    spare = np.clip(1.0 - np.nan_to_num(share, nan=1.0), 0.0, SPARE_MAX)
    return margin + spare * np.clip(1.0 - margin / floor, 0.0, 1.0)
