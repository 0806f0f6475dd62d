"""Each setting's own run-to-run noise, and the variance every statement about it uses (pure numpy).

Loader settings do not share one noise level (8 worker processes jitter far more than one), and a model
with one pooled variance then overstates its confidence wherever a noisy setting is compared: in
simulated null grids (11 settings, 3 blocks) a baseline 3x noisier than the rest made some setting
"different from baseline" in about 23% of grids instead of 5%.

So each setting gets its own variance, estimated without bias from the residuals of the additive model
(the MINQUE / Shukla stability-variance estimator: E[sum of squared residuals of setting s] is a known
linear function of the settings' variances, solved for them). With 3 blocks that estimate has about 2
degrees of freedom, so it is used conservatively: a setting's variance is the larger of the pooled one
and its own estimate taken at an upper quantile (`OWN_QUANTILE`) of its sampling distribution. The
quantile was chosen by simulation (docs/statistics.md): the lowest that keeps every tested noise
pattern's false-call rate at or under 5-6%; below it a noisy baseline that happened to look calm in its
3 runs makes false calls, above it power is lost for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

OWN_QUANTILE = 0.6  # a setting's own variance is read at this upper quantile of its chi-square spread
MIN_OWN_DF = 0.5  # fewer effective degrees of freedom than this: the setting's own spread is not estimable


@dataclass(frozen=True)
class Noise:
    """Per-setting variances on the log scale (relative noise squared), in the order of the design."""

    own: np.ndarray  # unbiased own estimate (NaN where not estimable); may be below the pooled one
    own_df: np.ndarray  # its effective degrees of freedom
    pooled: float  # the usual residual variance (NaN without residual degrees of freedom)
    used: np.ndarray  # what every interval uses: max(pooled, own read at OWN_QUANTILE)


def estimate(x: np.ndarray, resid: np.ndarray, setting_of_run: np.ndarray, k: int, df: int) -> Noise:
    """Per-setting variances from the design `x` (runs x parameters), the residuals and each run's setting."""
    n = len(resid)
    if df <= 0:
        nan = np.full(k, np.nan)
        return Noise(nan, np.zeros(k), float("nan"), nan)
    pooled = float(resid @ resid / df)
    m = np.eye(n) - x @ np.linalg.pinv(x)  # residual maker: resid = m @ y
    member = np.zeros((k, n))
    member[setting_of_run, np.arange(n)] = 1.0
    a = member @ (m**2) @ member.T  # E[sum of squared residuals of s] = sum_l a[s, l] * var_l
    own_df = member @ np.diag(m)
    sums = member @ resid**2
    if np.linalg.matrix_rank(a) < k:  # e.g. two settings in blocks: their residuals mirror each other
        own = np.full(k, np.nan)
    else:
        own = np.linalg.solve(a, sums)
    own = np.where(own_df >= MIN_OWN_DF, np.maximum(own, 0.0), np.nan)
    return Noise(own, own_df, pooled, used_variance(own, own_df, pooled))


def used_variance(own: np.ndarray, own_df: np.ndarray, pooled: float, quantile: float | None = None) -> np.ndarray:
    """max(pooled, own x df / chi2(1 - quantile, df)): a setting is never judged less noisy than the pool,
    and its own 2-degree-of-freedom estimate is not trusted at face value when it is the larger.
    `quantile` 0 gives the pooled model back."""
    quantile = OWN_QUANTILE if quantile is None else quantile
    df = np.maximum(own_df, MIN_OWN_DF)
    upper = own * df / stats.chi2.ppf(1.0 - quantile, df)
    return np.where(np.isnan(upper), pooled, np.maximum(upper, pooled))
