"""One model per fraction and testbed, and the simultaneous answers drawn from it (pure functions).

The model is log(run's epoch time) = setting + block, fitted by ordinary least squares over every usable run.
Settings differ in noise, so each gets its own variance (`wif.decide.noise`). That variance is never below
the pooled one, and its own estimate is read conservatively. The estimates' covariance is the sandwich built
from those variances. The pooled noise keeps its (k-1)(b-1) residual degrees of freedom for the critical
values. Without a usable block structure the block term is dropped: no block tags, one block, or blocks that
do not connect the settings. Unbalanced designs, such as a failed run or settings a race dropped, are fitted
as they are. Every interval below uses the fitted covariance.

One fit gives two families of simultaneous 95% statements: Dunnett's against the baseline, Hsu's MCB against
the best.

Critical values are the quantiles of the max-t statistic under the fitted design, drawn by simulation. The
seed is fixed: exact for any correlation pattern, reproducible run to run, cached per design.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.robust.norms import HuberT
from statsmodels.robust.robust_linear_model import RLM
from statsmodels.robust.scale import mad

from wif.decide import draws as draws_
from wif.decide import noise

DRAWS = 100_000  # Monte Carlo draws per critical value: its 95% quantile to about 0.3%
SEED = 20261122
OUTLIER_SDS = 3.5  # robust standard deviations beyond which a run's residual is flagged
MIN_OUTLIER_DF = 4  # fewer residual degrees of freedom than this: no robust scale worth the name


@dataclass(frozen=True)
class Fit:
    """The fitted model of one fraction: per-setting mean log time (block-adjusted) and its covariance."""

    settings: list[str]
    estimate: np.ndarray  # mean log time per setting, averaged over blocks
    cov: np.ndarray  # covariance of `estimate` (k x k)
    df: int  # residual degrees of freedom
    sigma: float  # pooled residual standard deviation on the log scale (~ relative run-to-run noise)
    noise: np.ndarray  # each setting's own relative run-to-run spread (log scale; NaN where not estimable)
    used: np.ndarray  # each setting's variance as every statement uses it (wif.decide.noise.used_variance)
    blocked: bool
    n_blocks: int
    n_runs: int

    def index(self, setting: str) -> int:
        return self.settings.index(setting)

    def se(self, i: int, j: int) -> float:
        """Standard error of estimate[i] - estimate[j]."""
        return float(np.sqrt(max(self.cov[i, i] + self.cov[j, j] - 2 * self.cov[i, j], 0.0)))


def design(runs: pd.DataFrame) -> tuple[np.ndarray, list[str], list[str]]:
    """The design matrix, the setting names and the block names.

    Cell-means columns for the settings come first. Sum-to-zero columns for the blocks follow when the blocks
    are usable and identifiable, so that a setting's coefficient is its mean over blocks. Without them the
    block names are empty.
    """
    loader = runs["loader"].to_numpy()
    settings = list(dict.fromkeys(loader))
    x = (loader[:, None] == np.array(settings, dtype=object)[None, :]).astype(float)
    block = runs["block"].to_numpy()
    if pd.isna(block).any():
        return x, settings, []
    block = np.array([str(b) for b in block], dtype=object)
    blocks = list(dict.fromkeys(block))
    if len(blocks) < 2:
        return x, settings, []
    sums = np.array([(block == name).astype(float) - (block == blocks[-1]) for name in blocks[:-1]]).T
    blocked = np.hstack([x, sums])
    if np.linalg.matrix_rank(blocked) < blocked.shape[1]:  # blocks that do not connect the settings
        return x, settings, []
    return blocked, settings, blocks


def fit(runs: pd.DataFrame, value: str, baseline: str | None = None) -> Fit:
    """Least squares of log(`value`) on setting, plus block where the blocks are usable and identifiable.

    Each setting gets its own variance, and the covariance follows from them. The `baseline`'s variance is
    read more carefully: every comparison against it shares it (wif.decide.noise).
    """
    y = np.log(runs[value].to_numpy(dtype=float))
    x, settings, blocks = design(runs)
    k, n = len(settings), len(y)
    bread = np.linalg.pinv(x)  # (X'X)^-1 X'
    params = bread @ y
    resid = y - x @ params
    df = n - int(np.linalg.matrix_rank(x))
    who = np.array([settings.index(name) for name in runs["loader"]])
    spread = noise.estimate(
        x=x,
        resid=resid,
        setting_of_run=who,
        k=k,
        df=df,
        shared=settings.index(baseline) if baseline in settings else None,
    )
    if df > 0:
        cov = (bread[:k] * spread.used[who]) @ bread[:k].T
    else:  # one run per setting: estimates without any spread to judge them by
        cov = np.full((k, k), np.nan)
    return Fit(
        settings=settings,
        estimate=params[:k],
        cov=cov,
        df=df,
        sigma=float(np.sqrt(spread.pooled)),
        noise=np.sqrt(spread.own),
        used=spread.used,
        blocked=len(blocks) > 1,
        n_blocks=len(blocks),
        n_runs=n,
    )


def _design(f: Fit) -> draws_.Design:
    return draws_.Design(cov_unit=np.round(f.cov / f.sigma**2, 10).tobytes(), k=len(f.settings), df=f.df)


# _critical and draws_.max_t are called positionally everywhere: lru_cache keys on how arguments are passed.
@functools.lru_cache(maxsize=256)
def _critical(design: draws_.Design, controls: tuple, two_sided: bool, confidence: float) -> np.ndarray:
    """Each control's `confidence` quantile of its draws, the ceil(confidence * n)-th smallest; cached per design.

    A race's every look asks again for the designs it has seen.

    Args:
        design: the fit's unit covariance and degrees of freedom.
        controls: the settings each row compares the others against.
        two_sided: the max of |t| instead of t.
        confidence: the quantile.
    """
    rows = draws_.max_t(design, controls, two_sided, DRAWS, SEED)
    i = min(int(np.ceil(confidence * DRAWS)) - 1, DRAWS - 1)
    return draws_.kth_smallest(rows, i)


@dataclass(frozen=True)
class VsBaseline:
    """Speedup = baseline time / setting time, with a simultaneous interval and an adjusted p-value."""

    speedup: float
    low: float
    high: float
    p_adj: float
    critical: float  # the max-|t| critical value the intervals use


def dunnett(f: Fit, baseline: str, confidence: float) -> dict[str, VsBaseline]:
    """Every setting against `baseline`, intervals simultaneous over the family (Dunnett, max-|t|)."""
    b = f.index(baseline)
    out: dict[str, VsBaseline] = {}
    if f.df <= 0 or len(f.settings) < 2:
        for j, name in enumerate(f.settings):
            if j != b:
                r = float(np.exp(f.estimate[b] - f.estimate[j]))
                out[name] = VsBaseline(speedup=r, low=np.nan, high=np.nan, p_adj=np.nan, critical=np.nan)
        return out
    draws = draws_.max_t(_design(f), (b,), True, DRAWS, SEED)[0]
    c = float(_critical(_design(f), (b,), True, confidence)[0])
    for j, name in enumerate(f.settings):
        if j == b:
            continue
        diff, se = f.estimate[b] - f.estimate[j], f.se(b, j)
        t = abs(diff) / se if se > 0 else np.inf
        p = float(np.count_nonzero(draws >= t) / len(draws))
        out[name] = VsBaseline(
            speedup=float(np.exp(diff)),
            low=float(np.exp(diff - c * se)),
            high=float(np.exp(diff + c * se)),
            p_adj=max(p, 1.0 / len(draws)) if np.isfinite(t) else 0.0,
            critical=c,
        )
    return out


@dataclass(frozen=True)
class VsBest:
    """How much slower than the fastest setting (whichever it is), as time ratios >= 1."""

    possibly_fastest: bool  # in the set that holds the fastest with the stated confidence
    at_least: float  # slower than the fastest by at least this factor (1.0: may be the fastest)
    at_most: float  # and by at most this factor
    tied: bool  # at_most within the margin: as fast as the fastest for any practical purpose


def mcb(f: Fit, confidence: float, margin: float) -> dict[str, VsBest]:
    """Hsu's constrained multiple comparisons with the best, smaller being better: faster.

    Let d_j be the one-sided max-t critical value when j is taken as the best. The set
    S = {i: y_i - y_j - d_i se_ij <= 0 for every j} holds the fastest. For each i, the time ratio to the
    fastest lies in [exp(low_i), exp(high_i)]. All hold simultaneously at `confidence`, with:

        `low_i = max(0, min over j in S, j != i, of y_i - y_j - d_j se_ij)`.
        `high_i = max(0, max over j in S, j != i, of y_i - y_j + d_j se_ij)`.

    See Hsu, Multiple Comparisons, 1996, ch. 4. `margin`, e.g. 0.02, is the practical tie.
    """
    k, y = len(f.settings), f.estimate
    if k == 1:
        return {f.settings[0]: VsBest(possibly_fastest=True, at_least=1.0, at_most=1.0, tied=True)}
    if f.df <= 0:
        return {name: VsBest(possibly_fastest=True, at_least=1.0, at_most=np.inf, tied=False) for name in f.settings}
    d = _critical(_design(f), tuple(range(k)), False, confidence)
    var = f.cov.diagonal()
    se = np.sqrt(np.maximum(var[:, None] + var[None, :] - 2 * f.cov, 0.0))
    diff = y[:, None] - y[None, :]
    s = [i for i in range(k) if all(diff[i, j] - d[i] * se[i, j] <= 0 for j in range(k) if j != i)]
    out = {}
    for i, name in enumerate(f.settings):
        rivals = [j for j in s if j != i]
        low = max(0.0, min((diff[i, j] - d[j] * se[i, j] for j in rivals), default=0.0))
        high = max(0.0, max((diff[i, j] + d[j] * se[i, j] for j in rivals), default=0.0))
        out[name] = VsBest(
            possibly_fastest=i in s,
            at_least=float(np.exp(low)),
            at_most=float(np.exp(high)),
            tied=bool(np.exp(high) <= 1 + margin),
        )
    return out


def outliers(runs: pd.DataFrame, value: str, limit: float = OUTLIER_SDS) -> pd.Series:
    """Runs whose residual in a robust fit of the same model lies beyond `limit` robust SDs.

    A least-squares residual spreads one bad run over its whole cell and block. With 3 blocks, the run's two
    siblings get half its residual, opposite in sign. A Huber fit leaves it on the run. The scale is the MAD of
    those residuals, corrected for the degrees of freedom the fit uses. Returns the robust z-score of each
    flagged run, indexed like `runs`; empty when the design leaves too few degrees of freedom.
    """
    if len(runs) == 0:
        return pd.Series(dtype=float)
    x, _, _ = design(runs)
    n, p = x.shape
    if n - p < MIN_OUTLIER_DF:
        return pd.Series(dtype=float)
    y = np.log(runs[value].to_numpy(dtype=float))
    resid = RLM(y, x, M=HuberT()).fit().resid
    scale = mad(resid, center=0.0) * np.sqrt(n / (n - p))
    if scale <= 0:
        return pd.Series(dtype=float)
    z = pd.Series(resid / scale, index=runs.index)
    return z[z.abs() > limit]
