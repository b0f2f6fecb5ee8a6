"""GP-UCB cost on a finite Λ: GPyTorch posterior (the plugin's path) vs a plain numpy Cholesky posterior (reference),
on the CPU and, when there is one, on CUDA.

Prints, for |Λ| candidates in [0, 1]^3 (Sobol-free: a seeded uniform draw) and T GP-UCB steps with the Matérn-5/2
kernel, the wall time of the whole GP-UCB loop and the ratio to the numpy reference measured in the same run.
Run: ``.venv/bin/python benchmarks/bench_gp.py`` (part of ``make bench``).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from dpaudit_plugins.kusner_bo.constants import beta_t
from dpaudit_plugins.kusner_bo.gp import GpPosterior, KernelSpec, gp_ucb, kernel_matrix

SPEC = KernelSpec("matern52", 0.2)
NOISE = 0.01
DELTA = 0.1


def _objective(X: np.ndarray):
    w = np.array([1.0, -2.0, 0.5])
    return lambda i: float(np.sin(X[i] @ w * 3.0))


def numpy_gp_ucb(X: np.ndarray, T: int) -> tuple[int, ...]:
    """The same GP-UCB loop with the posterior by numpy Cholesky (float64)."""
    K = kernel_matrix(SPEC, X)
    f = _objective(X)
    idx: list[int] = []
    y: list[float] = []
    for t in range(1, T + 1):
        if idx:
            L = np.linalg.cholesky(K[np.ix_(idx, idx)] + NOISE * np.eye(len(idx)))
            A = np.linalg.solve(L, K[idx, :])
            mean = A.T @ np.linalg.solve(L, np.array(y))
            std = np.sqrt(np.clip(1.0 - np.sum(A * A, axis=0), 0.0, None))
        else:
            mean, std = np.zeros(len(X)), np.ones(len(X))
        i = int(np.argmax(mean + math.sqrt(beta_t(len(X), t, DELTA)) * std))
        idx.append(i)
        y.append(f(i))
    return tuple(idx)


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"devices: {devices}" + (f" ({torch.cuda.get_device_name(0)})" if len(devices) > 1 else ""))
    print("| |Λ| | T | numpy reference s | " + " | ".join(f"gpytorch {d} s (ratio)" for d in devices) + " |")
    for n, T in ((512, 40), (2048, 60)):
        X = np.random.default_rng(0).uniform(size=(n, 3))
        reference = _time(lambda X=X, T=T: numpy_gp_ucb(X, T))
        cells = []
        for device in devices:
            gp_ucb(_objective(X), GpPosterior(SPEC, X, NOISE, device), 2, DELTA)  # warm-up (CUDA context)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = _time(lambda X=X, T=T, device=device: gp_ucb(_objective(X), GpPosterior(SPEC, X, NOISE, device),
                                                                   T, DELTA))
            cells.append(f"{seconds:.3f} ({seconds / reference:.2f}x)")
        print(f"| {n} | {T} | {reference:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
