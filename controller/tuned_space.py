"""A pool's tuned space: the parameters its learner searches are those its topology tunes that some agent of the
pool applies; every parameter no agent applies is held at the running config's value.

A deployment's `config:` (a preset, single values set) fills the parameters no agent takes, so that a config is
complete; searching them would log changes nothing puts in force. Each agent lists what its components take
(`params_allowed` in `GET /components`), so the pool's space is known once its agents answer. The twin takes every
parameter: its space is the topology's, nothing held.

A tuned wait that a steady load hides and every event of a lull sits out (a flush timeout beside its batch,
`max_backoff`) has a ceiling: the value the run first started on (`models.latency_bounds.lull_ceilings`; a resumed
run keeps its stored ones), which the learner's cube never goes above. The report shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from controller.state import TunedSpaceReport
from models.space import PIPELINE_SPACE, Config

Managers = Mapping[str, tuple[str, ...]]  # parameter -> each agent's component that applies it, as "node/component"
TWIN = "twin"  # who applies every parameter on the twin


class NothingToTune(ValueError):
    """No agent of a pool applies any parameter its learner would tune; the message names the pool and them."""


@dataclass(frozen=True)
class TunedSpace:
    """What a pool's learner searches and who applies each parameter; what it holds and why; the highest value it
    gives each wait a lull sits out.

    `managers` None: the twin, which takes every parameter (nothing is held)."""

    tuned: tuple[str, ...]
    held: Mapping[str, str]  # a parameter the topology tunes that no agent applies -> why it is held
    managers: Managers | None
    ceilings: Mapping[str, float]  # a tuned wait a lull sits out -> its highest value, as the run first started

    def applies(self, name: str) -> bool:
        """Whether some agent of the pool applies parameter `name` (on the twin, every one)."""
        return self.managers is None or name in self.managers

    def hold(self, target: Config, running: Config) -> Config:
        """`target` with every parameter no agent of the pool applies at its `running` value."""
        kept = {name: running[name] for name in target if not self.applies(name) and target[name] != running[name]}
        return PIPELINE_SPACE.config(kept, base=target) if kept else target

    def report(self) -> TunedSpaceReport:
        by = self.managers if self.managers is not None else dict.fromkeys(self.tuned, (TWIN,))
        return TunedSpaceReport(tuned={name: list(by[name]) for name in self.tuned}, held=dict(self.held),
                                managed=None if self.managers is None else sorted(self.managers),
                                ceilings=dict(self.ceilings))


def tuned_space(wanted: Sequence[str], managers: Managers | None, pool: str, ceilings: Mapping[str, float]
                ) -> TunedSpace:
    """The space of `pool`: of `wanted` (the learner's parameters, in order) those some agent applies, each of
    `ceilings` (a wait a lull sits out -> its highest value) among them held at most at it.

    `NothingToTune` when no agent applies any of them: a learner with nothing to search cannot decide."""
    if managers is None:
        return TunedSpace(tuple(wanted), {}, None, _among(ceilings, wanted))
    tuned = tuple(name for name in wanted if name in managers)
    held = {name: f"no agent of pool {pool} manages it" for name in wanted if name not in managers}
    if not tuned:
        raise NothingToTune(f"pool {pool}: no agent of the pool manages any parameter the learner tunes "
                            f"({', '.join(wanted)}); its agents manage {', '.join(sorted(managers)) or 'nothing'}")
    return TunedSpace(tuned, held, dict(managers), _among(ceilings, tuned))


def _among(ceilings: Mapping[str, float], tuned: Sequence[str]) -> dict[str, float]:
    return {name: value for name, value in ceilings.items() if name in tuned}
