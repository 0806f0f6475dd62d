"""The one place a verdict is computed, in pure functions on frames.

`decide(runs)` serves notebooks and scripts; `columns(fit)` serves the report and the race. Every word the
report prints about a setting rests on one of these columns.

Against the baseline (Dunnett): `speedup` with its simultaneous interval, `p_adj`, `significant`.
Against the fastest (Hsu's MCB): `possibly_fastest`, the set that holds the fastest. The ratio to the fastest
lies in [`slower_at_least`, `slower_at_most`].
`clearly_slower`: that lower bound is above 1. `slower_in_practice`: it is above 1 + margin.
`tied`: the upper bound is within the margin.
`undecided`: neither a tie nor a gap is shown. `more_blocks` says about how many more blocks would settle
it at the noise seen. `noise` is the setting's own run-to-run spread.

A setting outside the possibly-fastest set whose lower bound is 1 is *not shown to be fastest*, never
"slower": ties are common here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from wif.decide import model
from wif.measure import names

# Each setting against the fastest (multiple comparisons with the best): what the race replaces by its own.
VS_BEST = [
    "possibly_fastest",
    "slower_at_least",
    "slower_at_most",
    "tied",
    "clearly_slower",
    "slower_in_practice",
    "undecided",
    "more_blocks",
]
COLUMNS = ["time_s", "speedup", "speedup_ci_low", "speedup_ci_high", "p_adj", "significant", *VS_BEST, "noise"]
MAX_BLOCKS_SAID = 100  # beyond this, "about N more blocks" is no advice


def decide(
    runs: pd.DataFrame,
    value: str = names.EPOCH_TIME_MEDIAN_S,
    baseline: str = "baseline",
    confidence: float = 0.95,
    margin: float = 0.02,
) -> pd.DataFrame:
    """Who is faster among the settings of `runs`: one row per setting, indexed by setting, fastest first.

    Args:
        runs: one fraction and testbed's runs, with the columns `loader`, `block` and `value`.
        value: the run figure compared.
        baseline: the setting speedups are measured against.
        confidence: the simultaneous confidence of every statement.
        margin: the practical tie, e.g. 0.02.
    """
    missing = [c for c in ("loader", "block", value) if c not in runs]
    if missing:
        raise ValueError(f"decide: runs lack the column(s) {', '.join(missing)}")
    usable = runs[runs[value].notna() & (runs[value] > 0)]
    if usable.empty:
        raise ValueError(f"decide: no run has a positive {value}")
    out = columns(model.fit(usable, value, baseline), baseline, confidence, margin)
    return out.sort_values("time_s")


def columns(f: model.Fit, baseline: str, confidence: float, margin: float, alpha: float | None = None) -> pd.DataFrame:
    """The fit's answers as columns indexed by setting.

    Args:
        f: the fit of one fraction.
        baseline: the setting speedups are measured against; none where it did not run.
        confidence: the simultaneous confidence of every statement.
        margin: the practical tie, e.g. 0.02.
        alpha: the level that marks significance; 1 - confidence when None.
    """
    alpha = 1.0 - confidence if alpha is None else alpha
    rows: dict[str, dict] = {
        name: {"time_s": float(np.exp(f.estimate[i])), "noise": float(np.expm1(f.noise[i]))}
        for i, name in enumerate(f.settings)
    }
    if baseline in f.settings:
        rows[baseline].update(speedup=1.0)
        for name, c in model.dunnett(f, baseline, confidence).items():
            rows[name].update(
                speedup=c.speedup,
                speedup_ci_low=c.low,
                speedup_ci_high=c.high,
                p_adj=c.p_adj,
                significant=bool(c.p_adj < alpha) if not np.isnan(c.p_adj) else None,
            )
    for name, b in model.mcb(f, confidence, margin).items():
        rows[name].update(_vs_best(f, name, b, margin))
    # Rows as lists: DataFrame.from_dict and a reindex took a third of a decision (the advice decides often)
    return pd.DataFrame(
        [[row.get(c, np.nan) for c in COLUMNS] for row in rows.values()], index=list(rows), columns=COLUMNS
    )


def _vs_best(f: model.Fit, name: str, b: model.VsBest, margin: float) -> dict:
    """A setting's columns against the fastest.

    Args:
        f: the fit.
        name: the setting.
        b: its MCB answer.
        margin: the practical tie.
    """
    clearly = b.at_least > 1.0
    undecided = f.df > 0 and not b.tied and not clearly
    return dict(
        possibly_fastest=b.possibly_fastest,
        slower_at_least=b.at_least,
        slower_at_most=b.at_most,
        tied=b.tied,
        clearly_slower=clearly,
        slower_in_practice=b.at_least > 1.0 + margin,
        undecided=undecided,
        more_blocks=_more_blocks(f, name, b, margin) if undecided else np.nan,
    )


def _more_blocks(f: model.Fit, name: str, b: model.VsBest, margin: float) -> float:
    """About how many more blocks would shrink the interval to the fastest enough to show a tie or a gap.

    Intervals narrow as 1/sqrt(blocks) at the noise seen.

    Args:
        f: the fit.
        name: the undecided setting.
        b: its MCB answer.
        margin: the practical tie.
    """
    if not np.isfinite(b.at_most):
        return np.nan
    gap = float(f.estimate[f.index(name)] - f.estimate.min())  # log ratio to the fastest estimate
    half = math.log(b.at_most) - gap
    target = max(gap, math.log1p(margin) - gap)
    if half <= 0 or target <= 0:
        return np.nan
    blocks = f.n_blocks if f.blocked else max(1, round(f.n_runs / len(f.settings)))
    need = math.ceil(blocks * (half / target) ** 2)
    return float(min(max(need - blocks, 1), MAX_BLOCKS_SAID))
