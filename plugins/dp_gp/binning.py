"""The binning baselines Smith et al. (2018, Sec. 4 and supplement "Integral Kernel") compare the GP mechanisms with.

The public inputs are cut into a fixed product grid of bins (public edges), so each bin's members and count are
public. The sums of the clipped, normalised outputs per bin are released through the session, with Laplace noise
(the paper's choice) or Gaussian noise; replacing one output moves one bin sum by at most d, so d is the sums' L1 and
L2 sensitivity (the registered formulas ``dp_gp_bin_sums`` / ``dp_gp_bin_sums_l2``). The paper's per-bin mean noise
Lap(d/(n_b·ε)) is exactly this release divided by the public counts. Everything after the release is
post-processing: a GP is fitted to the noisy bin means of the occupied bins, either

* ``simple``: each mean observed at its bin's centre with the EQ kernel, or
* ``integral``: each mean observed as the average of the latent function over its bin, with the EQ kernel integrated
  over both arguments (the supplement's k_FF, divided by the bin volumes; closed form with erf, per dimension),

and each observation's noise variance is σ_n²/n_b (the data's own noise averaged) plus the release noise's variance
divided by n_b².
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import erf

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.gaussian import gaussian_event
from dpaudit.sensitivity import from_formula
from dpaudit.validation import check_epsilon, check_positive
from dpaudit_plugins.dp_gp.formulas import BIN_SUMS_FORMULA, BIN_SUMS_L2_FORMULA, as_inputs, as_lengthscale, eq_kernel
from dpaudit_plugins.dp_gp.release import PUBLIC_INPUTS, OutputRule

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession

SIMPLE, INTEGRAL = "simple", "integral"
KERNELS = (SIMPLE, INTEGRAL)
LAPLACE, GAUSSIAN = "laplace", "gaussian"
NOISES = (LAPLACE, GAUSSIAN)
#: the noise's grid is γ = Δ/(GRID_DIVISOR·B) for B bins: rounding B sums to it adds at most Δ/GRID_DIVISOR to Δ
GRID_DIVISOR = 1024


@dataclass(frozen=True)
class Bins:
    """A product grid of bins over the input space: ``edges[d]`` are the increasing public edges of dimension d.

    A point below the first or above the last edge of a dimension falls into that dimension's outer bin.
    """

    edges: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        edges = tuple(tuple(float(v) for v in axis) for axis in self.edges)
        if not edges or any(len(axis) < 2 or not np.all(np.diff(axis) > 0) or not np.all(np.isfinite(axis))
                            for axis in edges):
            raise InvalidParameter("bin edges must be, per input dimension, at least two finite increasing values")
        object.__setattr__(self, "edges", edges)

    @classmethod
    def uniform(cls, lower: Any, upper: Any, counts: Any) -> Bins:
        """``counts[d]`` equal bins from ``lower[d]`` to ``upper[d]`` (each a number, or one per dimension)."""
        lo, hi = np.atleast_1d(np.asarray(lower, dtype=np.float64)), np.atleast_1d(np.asarray(upper, dtype=np.float64))
        n = np.broadcast_to(np.atleast_1d(np.asarray(counts)), lo.shape)
        return cls(tuple(tuple(np.linspace(a, b, int(k) + 1)) for a, b, k in zip(lo, hi, n, strict=True)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(axis) - 1 for axis in self.edges)

    def assign(self, X: Any) -> np.ndarray:
        """The flat bin index of every point (row of X), a function of the public inputs only."""
        points = as_inputs(X, "X")
        if points.shape[1] != len(self.edges):
            raise InvalidParameter(f"the bins have {len(self.edges)} dimensions, the points {points.shape[1]}")
        per_axis = [np.clip(np.searchsorted(np.array(axis), points[:, d], side="right") - 1, 0, len(axis) - 2)
                    for d, axis in enumerate(self.edges)]
        return np.ravel_multi_index(per_axis, self.shape)

    def boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """The lower and upper corners of every bin, (B, D) each, in flat-index order."""
        grids = np.meshgrid(*[np.arange(k) for k in self.shape], indexing="ij")
        index = [g.ravel() for g in grids]
        lower = np.stack([np.array(axis)[i] for axis, i in zip(self.edges, index, strict=True)], axis=1)
        upper = np.stack([np.array(axis)[i + 1] for axis, i in zip(self.edges, index, strict=True)], axis=1)
        return lower, upper


def bin_sums(bins: Bins, X: Any, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums of ``y`` per bin (private), counts per bin (public: a function of X)), in flat-index order."""
    index = bins.assign(X)
    size = int(np.prod(bins.shape))
    return np.bincount(index, weights=np.asarray(y, dtype=np.float64), minlength=size), \
        np.bincount(index, minlength=size)


@dataclass(frozen=True)
class BinnedRelease:
    """The released bin sums and the public facts needed to use them.

    Attributes:
        bins: the public bins; counts: the public count per bin.
        sums: the noisy sums of the normalised outputs (released).
        noise_variance: the variance of each sum's noise (2b² for Laplace of scale b, σ² for Gaussian; the grid's
            rounding neglected).
        noise: "laplace" or "gaussian"; sensitivity: Δ of the sums (d).
    """

    bins: Bins
    counts: np.ndarray
    sums: np.ndarray
    noise_variance: float
    noise: str
    sensitivity: float


def release_bin_sums(view: PluginSession, bins: Bins, X: Any, y: Any, rule: OutputRule, epsilon: float, *,
                     noise: str = LAPLACE, delta: float | None = None, label: str = "") -> BinnedRelease:
    """Release the per-bin sums of the clipped, normalised outputs with Laplace (ε-DP) or Gaussian ((ε, δ)-DP) noise.

    The event is priced first (``view.check_affordable``): a refusal raises before the sums are computed.

    Raises:
        InvalidParameter: a bad noise kind, ε or δ, or outputs that do not match the inputs.
        BudgetExceeded: the release does not fit the budget.
    """
    check_epsilon(epsilon)
    points = as_inputs(X, "X")
    size = int(np.prod(bins.shape))
    label = label or f"dp-gp binning: {noise} noise on {size} bin sums"
    if noise == LAPLACE:
        sensitivity = from_formula(BIN_SUMS_FORMULA, view.neighbouring, assumptions=(PUBLIC_INPUTS,),
                                   **rule.formula_inputs())
        grid = sensitivity.value / (GRID_DIVISOR * size)
        event = view.laplace_event(sensitivity, epsilon, dimension=size, label=label, grid=grid)
        variance = 2.0 * event.scale ** 2
    elif noise == GAUSSIAN:
        if delta is None:
            raise InvalidParameter("Gaussian noise on the bin sums needs a delta")
        sensitivity = from_formula(BIN_SUMS_L2_FORMULA, view.neighbouring, assumptions=(PUBLIC_INPUTS,),
                                   **rule.formula_inputs())
        grid = sensitivity.value / (GRID_DIVISOR * size)
        event = gaussian_event(view.neighbouring, sensitivity, epsilon, delta, dimension=size, label=label, grid=grid)
        variance = event.sigma ** 2
    else:
        raise InvalidParameter(f"noise must be one of {list(NOISES)}, got {noise!r}")
    view.check_affordable([event])
    values = rule.apply(np.asarray(y))
    if values.shape != (len(points),):
        raise InvalidParameter(f"y must hold one output per input point ({len(points)}), got shape {values.shape}")
    sums, counts = bin_sums(bins, points, values)
    if noise == LAPLACE:
        noisy = view.laplace(sums, sensitivity, epsilon, label=label, grid=grid)
    else:
        noisy = view.gaussian(sums, sensitivity, epsilon, delta, label=label, grid=grid)
    return BinnedRelease(bins, counts, np.asarray(noisy, dtype=np.float64), variance, noise, sensitivity.value)


def _antiderivative(z: np.ndarray, ell: float) -> np.ndarray:
    """E(z) = ∫₀^z exp(−u²/(2ℓ²)) du = ℓ·sqrt(π/2)·erf(z/(ℓ√2))."""
    return ell * math.sqrt(math.pi / 2.0) * erf(z / (ell * math.sqrt(2.0)))


def _second_antiderivative(z: np.ndarray, ell: float) -> np.ndarray:
    """φ(z) with φ'' = exp(−z²/(2ℓ²)), φ(0) = ℓ²: z·E(z) + ℓ²·exp(−z²/(2ℓ²))."""
    return z * _antiderivative(z, ell) + ell * ell * np.exp(-0.5 * (z / ell) ** 2)


def box_average_kernel(lower: np.ndarray, upper: np.ndarray, lengthscale: Any, variance: float) -> np.ndarray:
    """Cov of the averages of f over boxes i and j: v·Π_d (1/(w_i w_j)) ∫∫ exp(−(u − u')²/(2ℓ_d²)) du du'
    (Smith et al. 2018, supplement, k_FF divided by the box volumes), (B, B)."""
    ell = as_lengthscale(lengthscale, lower.shape[1])
    out = np.full((len(lower), len(lower)), check_positive("variance", variance))
    for d in range(lower.shape[1]):
        s, t = lower[:, d][:, None], upper[:, d][:, None]
        s2, t2 = lower[:, d][None, :], upper[:, d][None, :]
        phi = lambda z, e=ell[d]: _second_antiderivative(z, e)  # noqa: E731
        out *= (phi(t - s2) + phi(s - t2) - phi(t - t2) - phi(s - s2)) / ((t - s) * (t2 - s2))
    return out


def box_point_kernel(points: np.ndarray, lower: np.ndarray, upper: np.ndarray, lengthscale: Any,
                     variance: float) -> np.ndarray:
    """Cov of f at each point and its average over each box: v·Π_d (E(t − x) − E(s − x))/(t − s), (P, B)."""
    ell = as_lengthscale(lengthscale, lower.shape[1])
    out = np.full((len(points), len(lower)), check_positive("variance", variance))
    for d in range(lower.shape[1]):
        x, s, t = points[:, d][:, None], lower[:, d][None, :], upper[:, d][None, :]
        out *= (_antiderivative(t - x, ell[d]) - _antiderivative(s - x, ell[d])) / (t - s)
    return out


def predict(released: BinnedRelease, X_star: Any, lengthscale: Any, variance: float, noise: float, *,
            kernel: str = SIMPLE, prior_mean: float = 0.0) -> np.ndarray:
    """The GP posterior mean at ``X_star`` given the noisy means of the occupied bins (normalised units;
    post-processing of the release).

    Raises:
        InvalidParameter: an unknown kernel, or no occupied bin.
    """
    if kernel not in KERNELS:
        raise InvalidParameter(f"kernel must be one of {list(KERNELS)}, got {kernel!r}")
    points = as_inputs(X_star, "X_star")
    occupied = released.counts > 0
    if not occupied.any():
        raise InvalidParameter("no bin holds a training point")
    counts = released.counts[occupied].astype(np.float64)
    means = released.sums[occupied] / counts
    observation_noise = check_positive("noise", noise) / counts + released.noise_variance / counts**2
    lower, upper = (corner[occupied] for corner in released.bins.boxes())
    if kernel == SIMPLE:
        centres = (lower + upper) / 2.0
        K = eq_kernel(centres, centres, lengthscale, variance)
        K_star = eq_kernel(points, centres, lengthscale, variance)
    else:
        K = box_average_kernel(lower, upper, lengthscale, variance)
        K_star = box_point_kernel(points, lower, upper, lengthscale, variance)
    factor = cho_factor(K + np.diag(observation_noise), lower=True)
    return prior_mean + K_star @ cho_solve(factor, means - prior_mean)


BINNING = "binning"
"""The plugin's ``method`` for the binning baseline (``dpaudit run dp-gp`` with ``bin_edges``)."""

BIN_KEYS = ("bin_edges", "bin_kernel", "bin_noise")
"""The configuration keys of the ``binning`` method."""


@dataclass(frozen=True)
class BinningOptions:
    """The ``binning`` method's public options: the bins, the GP kernel fitted to the noisy means, the noise kind."""

    bins: Bins
    kernel: str = INTEGRAL
    noise: str = LAPLACE

    @classmethod
    def from_mapping(cls, config: Any, dimension: int) -> BinningOptions:
        """Parse ``bin_edges`` (one list of increasing edges per input), ``bin_kernel``, ``bin_noise``.

        Raises:
            InvalidParameter: missing or malformed edges, an unknown kernel or noise kind.
        """
        edges = config.get("bin_edges")
        if not isinstance(edges, (list, tuple)) or len(edges) != dimension:
            raise InvalidParameter(f"the binning method needs bin_edges: one list of edges per input ({dimension})")
        kernel, noise = config.get("bin_kernel", INTEGRAL), config.get("bin_noise", LAPLACE)
        if kernel not in KERNELS or noise not in NOISES:
            raise InvalidParameter(f"bin_kernel must be one of {list(KERNELS)} and bin_noise one of {list(NOISES)}, "
                                   f"got {kernel!r}, {noise!r}")
        return cls(Bins(tuple(tuple(axis) for axis in edges)), kernel, noise)


def release_and_predict(view: PluginSession, options: BinningOptions, X: np.ndarray, y: Any, rule: OutputRule,
                        X_star: np.ndarray, lengthscale: Any, variance: float, noise: float, prior_mean: float,
                        epsilon: float, delta: float) -> dict[str, Any]:
    """The plugin's ``binning`` method: release the bin sums (charged), fit the GP to the noisy means, return the
    public results (predictions in the outputs' units at ``X_star``)."""
    released = release_bin_sums(view, options.bins, X, y, rule, epsilon, noise=options.noise, delta=delta)
    predictions = predict(released, X_star, lengthscale, variance, noise, kernel=options.kernel,
                          prior_mean=prior_mean)
    guarantee = f"{epsilon:g}-DP" if options.noise == LAPLACE else f"({epsilon:g}, {delta:g})-DP"
    return {"method": BINNING, "bin_kernel": options.kernel, "bin_noise": options.noise,
            "bins": int(np.prod(options.bins.shape)), "counts": released.counts.tolist(),
            "noisy_sums": released.sums.tolist(), "sensitivity": released.sensitivity,
            "test_points": X_star.tolist(), "predictions": rule.to_original(predictions).tolist(),
            "epsilon": epsilon, "delta": 0.0 if options.noise == LAPLACE else delta, "guarantee_kind": guarantee}
