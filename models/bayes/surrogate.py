"""One Gaussian process (scikit-learn): Matérn 5/2 with a length scale per input and a learned noise term."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel, Matern, WhiteKernel

from models.bayes.settings import LearnerSettings


class Surrogate:
    """A GP with per-dimension length scales and a learned noise term; build one with `margin_model` or
    `latency_model`.

    Margin model (`centred`): prior mean 0 and a fixed prior spread, which is what makes "unexplored" mean
    "not known to be safe" (SafeOpt). Latency models: prior mean = the mean of what was seen, and a prior
    spread of at least half a log unit, so a stage whose parameters were never moved is still expected to
    move when they are, and the optimism of the acquisition goes looking.
    """

    def __init__(self, kernel: Kernel, centred: bool, settings: LearnerSettings, seed: int = 0) -> None:
        self.kernel = kernel
        self.centred = centred
        self.settings = settings
        self.seed = seed
        self._offset = 0.0
        self._gp: GaussianProcessRegressor | None = None

    def fit(self, x: np.ndarray, y: np.ndarray, optimize: bool = True, noise_var: np.ndarray | None = None) -> None:
        """Condition on (x, y); with `optimize`, fit the kernel's hyperparameters too (from the last fitted ones:
        one optimiser run, no restarts), else keep the last fitted kernel, which costs one Cholesky solve.
        `noise_var`: each point's own measurement variance (0 where unknown), on top of the learned noise term:
        a point measured loosely pulls the posterior less."""
        self._offset = 0.0 if self.centred else float(np.mean(y))
        kernel = self._gp.kernel_ if self._gp is not None else self.kernel
        jitter = self.settings.gp_jitter
        alpha = jitter if noise_var is None else jitter + np.asarray(noise_var, dtype=float)
        gp = GaussianProcessRegressor(kernel, alpha=alpha, normalize_y=False, n_restarts_optimizer=0,
                                      random_state=self.seed,
                                      optimizer="fmin_l_bfgs_b" if optimize or self._gp is None else None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(x, y - self._offset)
        self._gp = gp

    @property
    def noise_var(self) -> float:
        """The fitted measurement-noise variance (the white-noise term), in the model's unit squared."""
        assert self._gp is not None, "fit before asking for the noise"
        return float(self._gp.kernel_.k2.noise_level)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and the std of the latent function (measurement noise taken out)."""
        assert self._gp is not None, "fit before predict"
        mean, std = self._gp.predict(x, return_std=True)
        return mean + self._offset, np.sqrt(np.maximum(std**2 - self.noise_var, self.settings.variance_floor))


def margin_model(dims: int, settings: LearnerSettings, seed: int) -> Surrogate:
    """The throughput margin's GP: a fixed prior spread `margin_prior_std` around 0, length scales capped so a
    flat run of feasible windows does not make it vouch for configs far from anything it has seen."""
    s = settings
    prior_std = s.margin_prior_std
    signal = ConstantKernel(prior_std**2, "fixed") * Matern(np.full(dims, s.length_scale_init), s.margin_length_bounds,
                                                            nu=s.matern_nu)
    start_divisor, max_divisor = s.margin_noise_divisors
    noise = WhiteKernel((prior_std / start_divisor) ** 2, (s.margin_noise_min**2, (prior_std / max_divisor) ** 2))
    return Surrogate(signal + noise, centred=True, settings=s, seed=seed)


def cost_model(dims: int, settings: LearnerSettings, seed: int) -> Surrogate:
    """A part's log-CPU GP (`costs`): around the mean of what was seen, with a fixed prior spread `cost_prior_std`,
    so that unmeasured configs are not known to be within budget; its length scales and noise learnt."""
    s = settings
    signal = ConstantKernel(s.cost_prior_std**2, "fixed") * Matern(np.full(dims, s.length_scale_init),
                                                                   s.latency_length_bounds, nu=s.matern_nu)
    return Surrogate(signal + WhiteKernel(s.cost_noise_var, s.latency_noise_var_bounds), centred=False,
                     settings=s, seed=seed)


def latency_model(dims: int, settings: LearnerSettings, seed: int) -> Surrogate:
    """A stage's log-P95 GP, around the mean of what was seen, its signal variance and noise learnt."""
    s = settings
    signal = ConstantKernel(s.latency_signal_var, s.latency_signal_var_bounds) * Matern(
        np.full(dims, s.length_scale_init), s.latency_length_bounds, nu=s.matern_nu)
    return Surrogate(signal + WhiteKernel(s.latency_noise_var, s.latency_noise_var_bounds), centred=False,
                     settings=s, seed=seed)
