"""Each setting's own run-to-run noise, and the variance every statement about it uses (pure numpy).

Loader settings do not share one noise level: 8 worker processes jitter far more than one. A model with one
pooled variance then overstates its confidence wherever a noisy setting is compared. We simulated null grids
of 11 settings and 3 blocks, with a baseline 3x noisier than the rest. Some setting was "different from
baseline" in about 23% of grids instead of 5%.

So each setting gets its own variance, estimated without bias from the residuals of the additive model. This
is the MINQUE or Shukla stability-variance estimator. E[sum of squared residuals of setting s] is a known
linear function of the settings' variances, and is solved for them. With 3 blocks that estimate has about 2
degrees of freedom, so it is used conservatively. A setting's variance is the larger of the pooled one and
its own estimate taken at an upper quantile of its sampling distribution.

The baseline is read more carefully than the rest. Its variance enters every comparison against it. A noisy
baseline that happened to look calm in its 3 runs understates all ten standard errors at once: a family-wide
false call. Any other setting's error touches its own comparison only. So the baseline's variance is its own
estimate, read at `SHARED_QUANTILE`, *plus* `SHARED_EXTRA` x the pooled one. The addition lifts a calm-looking
estimate, where false calls come from, far more than a large one, where power is lost. It protects at less
cost than reading the own estimate at a higher quantile. The constants were chosen by simulation
(docs/statistics.md): every tested noise pattern's false-call rate under 6%, then most power.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

OWN_QUANTILE = 0.2  # a setting's own variance is read at this upper quantile of its chi-square spread
SHARED_QUANTILE = 0.5  # ... and the baseline's (whose variance every comparison against it shares) at this,
SHARED_EXTRA = 1.5  # plus this many pooled variances
MIN_OWN_DF = 0.5  # fewer effective degrees of freedom than this: the setting's own spread is not estimable


@dataclass(frozen=True)
class Noise:
    """Per-setting variances on the log scale (relative noise squared), in the order of the design."""

    own: np.ndarray  # unbiased own estimate (NaN where not estimable); may be below the pooled one
    own_df: np.ndarray  # its effective degrees of freedom
    pooled: float  # the usual residual variance (NaN without residual degrees of freedom)
    used: np.ndarray  # what every interval uses (used_variance)


def estimate(
    x: np.ndarray, resid: np.ndarray, setting_of_run: np.ndarray, k: int, df: int, shared: int | None = None
) -> Noise:
    """Per-setting variances from the design, the residuals and each run's setting.

    Args:
        x: the design matrix, runs x parameters.
        resid: the least-squares residuals, one per run.
        setting_of_run: each run's setting, as its index in the design.
        k: how many settings.
        df: the residual degrees of freedom.
        shared: the index of the setting every comparison is made against, the baseline; None if none.
    """
    n = len(resid)
    if df <= 0:
        nan = np.full(k, np.nan)
        return Noise(own=nan, own_df=np.zeros(k), pooled=float("nan"), used=nan)
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
    return Noise(
        own=own, own_df=own_df, pooled=pooled, used=used_variance(own=own, own_df=own_df, pooled=pooled, shared=shared)
    )


def used_variance(own: np.ndarray, own_df: np.ndarray, pooled: float, shared: int | None = None) -> np.ndarray:
    """max(pooled, own x df / chi2(1 - quantile, df)), per setting.

    A setting is never judged less noisy than the pool, and its own 2-degree-of-freedom estimate is not
    trusted at face value. The `shared` setting's gets SHARED_EXTRA pooled variances on top. Quantiles and
    extra 0 give the pooled model back.

    Args:
        own: each setting's own estimate; NaN where not estimable.
        own_df: its effective degrees of freedom.
        pooled: the pooled residual variance.
        shared: the index of the baseline, whose variance every comparison shares; None if none.
    """
    used = np.where(np.isnan(own), pooled, np.maximum(_upper(own, own_df, OWN_QUANTILE), pooled))
    if shared is not None and not np.isnan(own[shared]):
        own_read = _upper(own[shared], own_df[shared], SHARED_QUANTILE)
        used[shared] = max(pooled, own_read + SHARED_EXTRA * pooled)
    return used


def _upper(own: np.ndarray, own_df: np.ndarray, quantile: float) -> np.ndarray:
    """The own estimate read at an upper `quantile` of its chi-square sampling spread (0: the estimate x 0)."""
    df = np.maximum(own_df, MIN_OWN_DF)
    return own * df / stats.chi2.ppf(1.0 - quantile, df)
