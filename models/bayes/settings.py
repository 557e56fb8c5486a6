"""Every number the safe Bayesian learner decides by, in one frozen object.

Each field's comment says where its value comes from: a method's published default (TuRBO's trust region,
scikit-learn's jitter), a statistical constant, or the measured case that chose it (its commit in
brackets; docs/learner.md tells the cases). "First cut" marks a value set when the learner was written and
not measured against another since.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.headroom import SPARE_MAX
from models.learning import HISTORY_BEST, HISTORY_RECENT


@dataclass(frozen=True)
class LearnerSettings:
    """What the learner is told, never what it learns (scikit-learn keeps the two apart the same way)."""

    # Safety and acquisition (SafeOpt, GP-UCB)
    beta: float = 2.0  # SafeOpt's β: safe where the margin's mean − β·std clears the floor (first cut; SafeOpt: 3)
    kappa: float = 1.0  # GP-UCB's weight: a stage's optimistic P95 is exp(μ − κσ) (first cut)
    margin_prior_std: float = 0.08  # the margin model's prior spread: unmeasured configs are not known safe (first cut)
    restart_discount: float = 0.8  # a restarting change must promise 1/0.8 the gain: the risk of a restart (first cut)
    restart_pause_prior_s: float = 3.0  # a restart's pause before one is measured: the calibrations' Filebeat
    far_spare: float = SPARE_MAX / 2  # an incumbent expected to leave this CPU share spare is far from it [94d977c]

    # Trust region and candidates (TuRBO; Add-GP-UCB's stage moves)
    candidates: int = 1024  # random candidates a look scores (TuRBO: min(100·d, 5000); first cut)
    perturbed_dims: float = 4.0  # dimensions a candidate moves on average (TuRBO: 20; first cut)
    length_init: float = 0.8  # TuRBO's initial side of the box, in the unit cube
    length_min: float = 0.1  # a side below it has collapsed: only expected gains count (TuRBO: 0.5^7, then restarts)
    length_max: float = 1.6  # TuRBO's largest side; the wide look beyond the region uses it too
    region_factor: float = 2.0  # TuRBO doubles the side after a streak of successes and halves it after failures
    success_streak: int = 2  # improvements in a row that double the side (TuRBO: 3; first cut)
    failure_streak: int = 4  # failures in a row that halve it (TuRBO: max(4, d) a point at a time; first cut)
    infeasible_failures: int = 4  # failures an infeasible window counts for: it halves the region at once (first cut)
    improvement_ratio: float = 0.99  # a success beats the best by 1 % (first cut; TuRBO 0.1 %) and the noise [b408d16]
    stage_moves: int = 256  # random moves of one stage's own parameters, per stage (Add-GP-UCB; first cut)
    score_chunk: int = 256  # candidates per scoring task handed to `parallel_map` (work split only)

    # Models (scikit-learn GPs; the offered load is a context input, as in CGP-UCB)
    load_range_eps: tuple[float, float] = (10.0, 1e6)  # offered loads mapped log-linearly onto [0, 1] (first cut)
    matern_nu: float = 2.5  # Matérn 5/2 with one length scale per input: TuRBO's and the usual BO kernel
    length_scale_init: float = 0.3  # every model's starting length scale, unit cube (first cut)
    margin_length_bounds: tuple[float, float] = (0.05, 2.0)  # capped: flat runs vouch for no far config (first cut)
    cost_beta: float = 1.0  # a cost's bound, mean + β·std: over budget, a window costs CPU and a rollback, not events
    cost_prior_std: float = 0.3  # a cost model's prior spread, log share of the budget: ±35 % (first cut)
    cost_clip_log: float = 1.0  # a part's share is told at most e× its median: one outlier set the whole model (zoo)
    cost_miss_windows: int = 20  # the windows a cost model's worst miss widens its bound for (10 min at 30 s)
    cost_noise_var: float = 1e-2  # a cost model's log noise variance, to start with: 10 % (first cut)
    cost_price_prior_windows: float = 1.0  # the doubt a work price is held toward 0 by, in windows' worth (costs)
    margin_noise_min: float = 0.003  # a window's output ratio is never known closer: events in flight [a0dce0c]
    margin_noise_divisors: tuple[float, float] = (10.0, 3.0)  # noise std starts at prior/10, under prior/3 (first cut)
    latency_signal_var: float = 1.0  # a stage model's prior variance of log P95, to start with (first cut)
    latency_signal_var_bounds: tuple[float, float] = (0.25, 4.0)  # a prior spread of 0.5-2 log units (first cut)
    latency_length_bounds: tuple[float, float] = (0.03, 3.0)  # a stage model's length scales (first cut)
    latency_noise_var: float = 1e-2  # a stage model's log-P95 noise variance, to start with: 10 % (first cut)
    latency_noise_var_bounds: tuple[float, float] = (1e-4, 0.25)  # 1 % to 50 % a window (first cut)
    gp_jitter: float = 1e-10  # scikit-learn's default `alpha`, under each window's own stated variance
    variance_floor: float = 1e-18  # the least latent variance a prediction reports (round-off guard)
    refit_every: int = 10  # windows between hyperparameter fits after the first 10: each took seconds [b408d16]
    finest_s: float = 1e-5  # the finest latency step modelled: the twin's are exact, a log needs a floor [9406c5e]

    # Thresholds: converge and stay
    confidence_z: float = 2.0  # a change must promise more than this many noise deviations of a window [b408d16]
    min_gain: float = 0.05  # ... and this share of the incumbent's P95: filebeat-kafka steady 1.28x→1.02x [9406c5e]
    noise_dof: int = 3  # repeated windows before the measured noise counts; the models' noise terms before [b408d16]
    noise_floor: float = 0.01  # no window is measured closer than this share of its P95 [b408d16]
    noise_alike_ratio: float = 1.5  # configs within this factor of the incumbent's P95 share its noise [b408d16]
    robust_sd: float = 1.4826  # a normal distribution's std over its median absolute deviation, 1/Φ⁻¹(3/4)
    moved_tolerance: float = 1e-9  # a unit-cube coordinate that moved less has not moved (restart detection)

    # Phases
    min_search: int = 10  # windows a search looks around; then, far from capacity, only expected gains [94d977c]
    free_hope: int = 5  # windows far from capacity a step may go where models only hope [7dc0d00]
    safe_share_settled: float = 0.25  # of the region known safe: beyond, no window just grows the safe set [f0d69a3]
    expand_step: float = 0.05  # a step toward a goal the budget keeps out gets this much nearer (unit cube; first cut)
    drift_z: float = 3.0  # a converged incumbent's P95 this many noise deviations off re-opens the search [b408d16]
    drift_min: float = 0.1  # ... if it also moved by this share of its P95: bench.measurement run 9 [3f83140]
    drift_windows: int = 2  # the incumbent's last windows whose mean is compared with those before [b408d16]

    # Twin pre-screen and memory
    screen_top: int = 6  # best candidates simulated on the twin before one is proposed (first cut)
    capacity_screen: int = 32  # configs simulated for a step toward capacity under overload (a screen ~0.05 s)
    history_recent: int = HISTORY_RECENT  # windows the models keep (models.learning's, as the state directory)
    history_best: int = HISTORY_BEST  # ... and the best feasible older ones
