"""The rules one window's decision is made of, each a small pure function over the scored candidates.

`SafeBayesLearner._search` applies them in order: while the incumbent itself falls behind, move toward
capacity (`incumbent_breached`, `most_capable`, else on the twin's word: `capacity_pick`), or, over the CPU
budget, back within it; hold while converged, unless something re-opens the search (`reopening`); keep only
candidates that carry the recent peak load (`carries_peak`); pick which gain counts (`expects_only`) and score
it (`gains`), far from capacity only where no loss is expected (`no_loss`); if nothing beats the threshold,
first know the noise (`noise_unknown`), then grow the safe set while the search is young (`young`,
`expanders`), else look beyond the trust region (`beyond_expects_only`) and widen, or, where the best gain lies
in a config only the CPU budget's uncertainty keeps out, expand toward it (`budget_expander`), or converge; rank
what beats the threshold (`ranked`) and let the twin's pre-screen pick the first it expects to keep up (`screen_pick`).
`tell` reads one of them: a window behind where one fell behind before (`overload_shared`) resizes no trust region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from models.bayes.phase import Converged, Phase, Reopened, Reopening, SearchState
from models.bayes.settings import LearnerSettings
from models.learning import at_or_below, load_moved
from models.screen import screen_bar
from models.space import Config


@dataclass(frozen=True)
class Pool:
    """Candidates (unit cube) with their predicted P95, its optimistic bound, the margin's mean and std, whether
    each is predicted safe, and whether it would be but for a CPU budget its cost models expect it within without
    being able to vouch for it (`hoped`: GoOSE's goals, `budget_expander`)."""

    cand: np.ndarray
    mean: np.ndarray
    optimistic: np.ndarray
    m_mean: np.ndarray
    m_std: np.ndarray
    safe: np.ndarray
    hoped: np.ndarray


def reopening(held: Converged, incumbent: Config, offered_eps: float) -> Reopening | None:
    """While converged, hold the incumbent until the load moves beyond `LOAD_SHIFT` (the load is the models'
    context input, as in CGP-UCB: they predict the new load, but a search must look) or the daemon holds another
    incumbent; the re-opening then, else None."""
    if load_moved(held.offered_eps, offered_eps):
        return Reopening(Reopened.LOAD_MOVED, f"load moved {held.offered_eps:.0f} → {offered_eps:.0f} ev/s")
    if incumbent != held.config:
        return Reopening(Reopened.INCUMBENT_CHANGED, "the daemon's incumbent changed")
    return None


def incumbent_breached(breached: tuple[Config, float] | None, incumbent: Config, offered_eps: float) -> bool:
    """Whether the incumbent itself broke a rule in the last window (`breached`: the config and load of a window that
    fell behind, or went over the CPU budget), at about this load: the search then goes toward capacity, or back
    within budget, before latency."""
    return breached is not None and breached[0] == incumbent and not load_moved(breached[1], offered_eps)


def overload_shared(offered_eps: float, shipped_eps: float, loads_eps: Sequence[float],
                    shipped_behind_eps: Sequence[float]) -> bool:
    """Whether a window that fell behind met an overload a window (of any config) met before it: one fell behind at
    about this load or a lower one (`loads_eps`; `shipped_behind_eps` is nan where one kept up), shipping no more
    than this one did. The overload is then the load's, not the config's (the daemon's rule for not rolling back)."""
    return any(shipped <= shipped_eps and at_or_below(load, offered_eps)
               for load, shipped in zip(loads_eps, shipped_behind_eps) if not np.isnan(shipped))


def most_capable(margins: np.ndarray, incumbent_margin: float, min_gain: float) -> int | None:
    """The index of the highest expected margin in `margins` if it beats the incumbent's by more than `min_gain`;
    None where none does."""
    if len(margins) == 0:
        return None
    best = int(np.argmax(margins))
    return best if margins[best] - incumbent_margin > min_gain else None


def capacity_pick(ratios: np.ndarray, incumbent_ratio: float, p95_s: np.ndarray, min_throughput_ratio: float,
                  min_gain: float, fell_behind: Sequence[float] = ()) -> int | None:
    """The index of the config to step to under overload, from each simulated config's twin ratio (`ratios`) and
    its expected P95 (`p95_s`): of those the twin expects to keep up (the ratio at the policy's floor), the
    fastest; else the most capable, where its ratio beats the incumbent's by more than `min_gain`; None where
    none does. A twin fitted to imperfect measurements is trusted for its ranking only above the configs it
    ranked that the pipeline showed falling behind (`fell_behind`, their twin ratios): below, its ranking was
    shown wrong, and steps it vouched for were rolled back at the next burst, one restart each for nothing
    (zoo, capped paper MMPPs: 13-18 more restarts, the same final P95)."""
    eligible = ratios > max(fell_behind, default=-np.inf)
    if not np.any(eligible):
        return None
    keeps_up = eligible & (ratios >= min_throughput_ratio)
    if np.any(keeps_up):
        return int(np.argmin(np.where(keeps_up, p95_s, np.inf)))
    best = int(np.argmax(np.where(eligible, ratios, -np.inf)))
    return best if ratios[best] - incumbent_ratio > min_gain else None


def carries_peak(peak_margins: np.ndarray, incumbent_margin: float, margin_floor: float) -> np.ndarray:
    """Which candidates are expected to carry the highest load the pipeline was measured at recently (a diurnal
    crest, a burst) as well as the incumbent does: their margin there (`peak_margins`, expected) at or above the
    floor, or at or above the incumbent's where the incumbent falls below the floor there too. SafeOpt's safe
    set holds for the window's load only; a config adopted in a trough must not give up the capacity the crest
    needs."""
    return peak_margins >= min(margin_floor, incumbent_margin)


def expects_only(search: SearchState, far_from_capacity: bool, s: LearnerSettings) -> bool:
    """Whether only the gain the models expect counts (κ = 0), not the optimistic one (GP-UCB's lower bound): once
    the trust region collapsed (TuRBO: nothing found however close it looked), on known ground (a load move), and
    far from capacity once the search measured `min_search` windows: there a step off what the models expect
    breaks nothing and gains little, while near capacity the gains hide where the models are unsure."""
    return (search.phase is Phase.EXHAUSTED or search.known_ground
            or (far_from_capacity and search.windows >= s.min_search))


def restart_price_s(pause_s: float, horizon_s: float) -> float:
    """The P95 gain (s) a change that restarts a component must promise beyond any other's: the delay its pause
    puts on the events, repaid within `horizon_s`. A pause of p s holds every event arriving in it p/2 s on
    average, p²/2 event-seconds per event/s of load; a gain of g s an event repays that in p²/2g seconds at any
    load, so within the horizon when g ≥ p² / (2 · horizon). (The risk that it only seems to gain is
    `restart_discount`'s to price, `gains`.)"""
    return pause_s ** 2 / (2 * horizon_s)


def restart_prices_s(cand: np.ndarray, current: np.ndarray, restart_dims: Mapping[str, np.ndarray],
                     pauses_s: Mapping[str, float], horizon_s: float, s: LearnerSettings) -> np.ndarray:
    """Each candidate's price (`restart_price_s`) for the component it restarts whose pause is longest (components
    restart side by side), from the `current` config's coordinates: 0 where it restarts none. A component's pause is
    its latest measured one (`pauses_s`), `restart_pause_prior_s` before any."""
    prices = np.zeros(len(cand))
    for component, dims in restart_dims.items():
        price = restart_price_s(pauses_s.get(component, s.restart_pause_prior_s), horizon_s)
        prices = np.where(restarting(cand, current, dims, s), np.maximum(prices, price), prices)
    return prices


def gains(pool: Pool, incumbent_p95_s: float, expected: bool, prices_s: np.ndarray,
          s: LearnerSettings) -> np.ndarray:
    """Each candidate's gain over the incumbent's predicted P95, expected or optimistic (the P95's lower bound,
    GP-UCB's optimism); where it restarts a component (a price in `prices_s`), × `restart_discount` for the risk
    that it only seems to gain (a trial that loses restarts again coming back) and less the price of the delay
    its pause puts on the events (`restart_prices_s`). -inf where not safe (SafeOpt: only the safe set is
    proposed)."""
    gain = incumbent_p95_s - (pool.mean if expected else pool.optimistic)
    gain = np.where(prices_s > 0, gain * s.restart_discount - prices_s, gain)
    return np.where(pool.safe, gain, -np.inf)


def restarting(cand: np.ndarray, current: np.ndarray, dims: np.ndarray, s: LearnerSettings) -> np.ndarray:
    """Which candidates change one of the dimensions `dims` (a mask), from the `current` config's coordinates."""
    return np.any(np.abs(cand - current)[:, dims] > s.moved_tolerance, axis=1)


def no_loss(gain: np.ndarray, pool: Pool, incumbent_p95_s: float, far_from_capacity: bool, expected: bool,
            windows: int, s: LearnerSettings) -> np.ndarray:
    """Far from capacity, once a search measured `free_hope` windows, an optimistic step only goes where the
    models expect no loss (predicted P95 ≤ the incumbent's): there a step the models expect to be slower only
    moved a config that had come near its final. The gains, -inf where the rule bars a candidate."""
    if far_from_capacity and not expected and windows >= s.free_hope:
        return np.where(pool.mean <= incumbent_p95_s, gain, -np.inf)
    return gain


def noise_unknown(dof: int, s: LearnerSettings) -> bool:
    """Whether the noise still rests on fewer than `noise_dof` repeated windows: before a search stops, it measures
    the incumbent again, so that the threshold it stops by is the noise's, not the models' guess."""
    return dof < s.noise_dof


def young(search: SearchState, safe_share: float, s: LearnerSettings) -> bool:
    """Whether the search is young and knows little around the incumbent safe (SafeOpt's expansion phase): in its
    first `min_search` windows, not collapsed, not on known ground, under `safe_share_settled` of the trust region
    predicted safe. Where much of it is safe already, a window spent growing the safe set only moves the config."""
    return (search.phase is Phase.SEARCHING and not search.known_ground and search.windows < s.min_search
            and safe_share < s.safe_share_settled)


def expanders(pool: Pool, incumbent_p95_s: float) -> np.ndarray | None:
    """SafeOpt's expanders, approximately: among safe candidates that could be faster at all (optimistic P95 below
    the incumbent's), most uncertain first (P95's spread + the margin's std), so the safe set grows where models
    of a few windows have not looked; None when no safe candidate could be faster."""
    could_gain = pool.safe & (pool.optimistic < incumbent_p95_s)
    if not np.any(could_gain):
        return None
    return np.argsort(-np.where(could_gain, pool.mean - pool.optimistic + pool.m_std, -np.inf))[: int(could_gain.sum())]


def budget_expander(pool: Pool, goal_gains_s: np.ndarray, threshold_s: float, incumbent_p95_s: float,
                    measured: np.ndarray, min_step: float) -> tuple[np.ndarray, int] | None:
    """Goal-oriented safe exploration (GoOSE, Turchetta, Berkenkamp & Krause 2019) toward a config the CPU budget
    keeps out: the goal is the best of `pool.hoped` by `goal_gains_s` (its gain as if it were safe), where that
    beats the threshold; the expanders are the safe candidates nearer to it (unit cube) than every config measured
    (`measured`) by `min_step`, and expected no slower than the incumbent, nearest first. Measuring one teaches the
    cost models about the ground between, so the set known within budget grows toward the goal instead of the
    search stopping at its edge; requiring progress on every config measured ends the expansion. (the expanders,
    the goal's index), or None."""
    gains_s = np.where(pool.hoped, goal_gains_s, -np.inf)
    goal = int(np.argmax(gains_s))
    if not gains_s[goal] > threshold_s:
        return None
    distance = np.linalg.norm(pool.cand - pool.cand[goal], axis=1)
    reached = float(np.min(np.linalg.norm(measured - pool.cand[goal], axis=1)))
    nearer = pool.safe & (distance <= reached - min_step) & (pool.mean <= incumbent_p95_s)
    if not np.any(nearer):
        return None
    return np.argsort(np.where(nearer, distance, np.inf))[: int(nearer.sum())], goal


def beyond_expects_only(search: SearchState, far_from_capacity: bool) -> bool:
    """Whether only expected gains count beyond the trust region (in a box as wide as the cube), where the safe set
    reaches past the box and, near capacity, the big gains lie: on known ground, or far from capacity; otherwise
    the optimistic gain, as in a young search."""
    return search.known_ground or far_from_capacity


def ranked(gain: np.ndarray, threshold_s: float) -> np.ndarray:
    """The candidates whose gain beats the threshold, best first."""
    return np.argsort(-gain)[: int(np.sum(gain > threshold_s))]


def screen_pick(top: Sequence[int], ratios: Sequence[float], incumbent_ratio: float, kept_up: Sequence[float],
                fell_behind: Sequence[float], min_throughput_ratio: float) -> int | None:
    """The first of the best-ranked candidates `top` whose twin ratio (`ratios`) clears the bar (`screen_bar`):
    first the bar of the incumbent's own twin ratio, then, where none does, within a step of every config the
    pipeline was measured keeping up (`kept_up`); never below one that fell behind (`fell_behind`, the twin's
    ratios of configs measured at about this load). None where no candidate clears either."""
    bars = (screen_bar([incumbent_ratio], fell_behind, min_throughput_ratio, step=1.0),
            screen_bar([incumbent_ratio, *kept_up], fell_behind, min_throughput_ratio))
    for bar in bars:
        passing = next((k for k, ratio in zip(top, ratios) if ratio >= bar), None)
        if passing is not None:
            return passing
    return None
