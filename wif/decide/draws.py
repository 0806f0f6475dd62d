"""The simulated draws behind the model's critical values, made cheaply and exactly as numpy makes them.

A race fits a new design at every look. Each used to draw 100,000 x k fresh normals, which depend on k and the
seed only. They are now drawn once per k and turned into the design's draws as numpy's `multivariate_normal`
(method="eigh") does, bit for bit. `max_t` turns them into the max-t statistics.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController


@functools.lru_cache(maxsize=1)
def blas_pools() -> ThreadpoolController:
    """The process's thread pools, found once: finding them reads every loaded library, 5 ms a time."""
    return ThreadpoolController()


@functools.lru_cache(maxsize=8)  # a race's designs shrink from k settings down: 8.8 MB each at 11 settings
def standard_normals(k: int, draws: int, seed: int) -> tuple[np.ndarray, dict]:
    """`default_rng(seed)`'s first draws x k standard normals and the state after; writeable, so matmul uses BLAS."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((draws, k))
    return x, rng.bit_generator.state


def errors(cov_unit: np.ndarray, df: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Estimation errors in units of sigma, and the chi-square scale of the residual variance.

    They are what `rng.multivariate_normal(zeros, cov_unit, size=draws, method="eigh")` and then
    `np.sqrt(rng.chisquare(df, size=draws) / df)` give from `rng = default_rng(seed)`.

    Args:
        cov_unit: the estimates' covariance over sigma^2.
        df: the residual degrees of freedom.
        draws: how many draws.
        seed: the generator's seed.
    """
    k = len(cov_unit)
    x, state = standard_normals(k, draws, seed)
    s, u = np.linalg.eigh(cov_unit.astype(np.double))
    if np.any(s < -1e-8):  # multivariate_normal's check_valid="warn" at its default tol
        warnings.warn("covariance is not symmetric positive-semidefinite.", RuntimeWarning, stacklevel=2)
    # One BLAS thread: beside training runs, threads waiting for busy cores made this product 10x slower.
    with blas_pools().limit(limits=1, user_api="blas"):
        z = np.zeros(k) + x @ (u * np.sqrt(abs(s))).T
    rng = np.random.default_rng(seed)
    rng.bit_generator.state = state
    w = np.sqrt(rng.chisquare(df, size=draws) / df)
    return z, w


def kth_smallest(rows: np.ndarray, i: int) -> np.ndarray:
    """Each row's `i`-th smallest value, 0-based, as `np.partition` gives it, searched above a sampled threshold."""
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


class Design(NamedTuple):
    """What a fit's critical values depend on, hashable for the caches: its unit covariance, k and df."""

    cov_unit: bytes  # cov / sigma^2, rounded to 10 decimals, as bytes
    k: int
    df: int


@functools.lru_cache(maxsize=16)  # 11 settings' draws are 9 MB; the model caches the quantiles that looks reuse
def max_t(design: Design, controls: tuple, two_sided: bool, draws: int, seed: int) -> np.ndarray:
    """Draws of max_j t(control - j) for each control, one row each, unsorted; cached per design.

    A race looks after every block, and each look of a new design pays this. A quantile and a tail count
    need no sort.

    Args:
        design: the fit's unit covariance and degrees of freedom.
        controls: the settings each row compares the others against.
        two_sided: the max of |t| instead of t.
        draws: how many simulated draws.
        seed: the generator's seed.
    """
    k, df = design.k, design.df
    cov_unit = np.frombuffer(design.cov_unit).reshape(k, k)
    z, w = errors(cov_unit, df, draws, seed)
    z = np.ascontiguousarray(z.T)  # one setting's draws in a row: the loop below reads rows, never copies columns
    out = np.full((len(controls), draws), -np.inf)
    row_of = {c: row for row, c in enumerate(controls)}
    t = np.empty(draws)
    for row, c in enumerate(controls):
        for j in range(k):
            mirrored = j in row_of and cov_unit[c, j] == cov_unit[j, c]  # t(j - c) = -t(c - j), bit for bit
            if j == c or (mirrored and row_of[j] < row):
                continue  # j's row, done before this one, put this pair's t here already
            se = np.sqrt(max(cov_unit[c, c] + cov_unit[j, j] - 2 * cov_unit[c, j], 1e-300))
            np.divide(np.subtract(z[c], z[j], out=t), se, out=t)
            if two_sided:
                np.abs(t, out=t)
            np.maximum(out[row], t, out=out[row])
            if mirrored:  # row j, still to come, gets the same pair's t seen from j
                np.maximum(out[row_of[j]], t if two_sided else np.negative(t, out=t), out=out[row_of[j]])
        out[row] /= w  # w > 0 scales every j alike: divide the maximum only; every pair of this row is in
    return out
