"""The simulated draws behind the model's critical values, made cheaply and exactly as numpy makes them.

A race fits a new design at every look (each setting's own variance changes the covariance), and each new
design drew 100,000 x k fresh standard normals inside `Generator.multivariate_normal`: most of its cost,
though those normals depend on k and the seed only. They are drawn once per (k, draws) here and turned into
the design's draws step for step as numpy does (numpy/random/_generator.pyx, `multivariate_normal` with
method="eigh"), so every number is the same as before, bit for bit.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np


@functools.lru_cache(maxsize=8)  # a race's designs shrink from k settings down: 8.8 MB each at 11 settings
def standard_normals(k: int, draws: int, seed: int) -> tuple[np.ndarray, dict]:
    """`default_rng(seed)`'s first draws x k standard normals, and the generator's state after them. Left
    writeable: numpy's matmul skips BLAS for a read-only operand (about 6x slower here)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((draws, k))
    return x, rng.bit_generator.state


def errors(cov_unit: np.ndarray, df: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Estimation errors (in units of sigma) and the chi-square scale of the residual variance: what
    `rng.multivariate_normal(zeros, cov_unit, size=draws, method="eigh")` and then
    `np.sqrt(rng.chisquare(df, size=draws) / df)` give from `rng = default_rng(seed)`."""
    k = len(cov_unit)
    x, state = standard_normals(k, draws, seed)
    s, u = np.linalg.eigh(cov_unit.astype(np.double))
    if np.any(s < -1e-8):  # multivariate_normal's check_valid="warn" at its default tol
        warnings.warn("covariance is not symmetric positive-semidefinite.", RuntimeWarning, stacklevel=2)
    z = np.zeros(k) + x @ (u * np.sqrt(abs(s))).T
    rng = np.random.default_rng(seed)
    rng.bit_generator.state = state
    w = np.sqrt(rng.chisquare(df, size=draws) / df)
    return z, w


def kth_smallest(rows: np.ndarray, i: int) -> np.ndarray:
    """Each row's `i`-th smallest value (0-based), the value `np.partition(rows, i, axis=1)[:, i]` gives, found
    among the row's values at or above a threshold read off a sample (all of the row when that holds too few)."""
    n = rows.shape[1]
    top = n - i  # how many values lie at or above the answer
    out = np.empty(len(rows))
    for r, row in enumerate(rows):
        sample = row[::16]
        m = len(sample)
        below = max(int(m * i / n) - int(4 * np.sqrt(m) + 8), 0)  # well under the sample's own i/n quantile
        v = np.partition(sample, below)[below]
        top_part = row[row >= v]
        if len(top_part) < top or np.isnan(row).any():  # NaN sorts last in np.partition, after +inf
            out[r] = np.partition(row, i)[i]
        else:  # top_part is the row's largest len(top_part) values: the answer is its (len - top)-th smallest
            out[r] = np.partition(top_part, len(top_part) - top)[len(top_part) - top]
    return out
