"""A fraction's answer from its runs: per-cell figures, the model's comparisons, and runs set apart.

Pure functions on frames (no MLflow, no plotting); the estimation itself lives in `model`. Times are
compared as ratios (speedup = baseline time / setting time) on the log scale where ratios are symmetric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from wif.decide import decision, model
from wif.measure import names


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval; the bounds are NaN when it cannot be computed."""

    estimate: float
    low: float = float("nan")
    high: float = float("nan")


def mean_ci(values: Sequence[float], confidence: float) -> Interval:
    """Mean with a Student-t interval; no interval below two values (nothing to estimate spread from)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean)
    sem = float(stats.sem(x))
    if sem == 0.0:
        return Interval(mean, mean, mean)
    low, high = stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high))


def missing_in_blocks(runs: pd.DataFrame, value: str) -> dict[str, list[str]]:
    """For each incomplete block, the loaders of `runs` that have no usable run in it."""
    matrix = runs.dropna(subset=["block"]).pivot_table(index="block", columns="loader", values=value, aggfunc="mean")
    return {str(block): list(row.index[row.isna()]) for block, row in matrix.iterrows() if row.isna().any()}


def pareto_mask(time: Sequence[float], memory: Sequence[float]) -> np.ndarray:
    """Points no other point beats on both time and memory (lower is better on both); NaNs are never on it."""
    t, m = np.asarray(time, dtype=float), np.asarray(memory, dtype=float)
    ok = ~(np.isnan(t) | np.isnan(m))
    mask = np.zeros(t.size, dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (t <= t[i]) & (m <= m[i]) & ((t < t[i]) | (m < m[i]))
        mask[i] = not dominated.any()
    return mask


def summarize_cells(runs: pd.DataFrame, value: str, metrics: Sequence[str], confidence: float) -> pd.DataFrame:
    """One row per loader: repeats, mean of the run figure `value` with its interval, means of `metrics`.

    Args:
        runs: one fraction's runs.
        value: the run figure compared.
        metrics: the other figures averaged.
        confidence: the level of the interval.
    """
    rows = []
    for loader, group in runs.groupby("loader", sort=False):
        time = mean_ci(group[value], confidence)
        row = {
            "loader": loader,
            "n": len(group),
            "time_s": time.estimate,
            "time_ci_low_s": time.low,
            "time_ci_high_s": time.high,
        }
        row.update({m: float(group[m].mean()) if m in group and group[m].notna().any() else np.nan for m in metrics})
        rows.append(row)
    return pd.DataFrame(rows).set_index("loader")


@dataclass(frozen=True)
class Comparison:
    """How a fraction's settings are compared: against which setting, on which run figure, at which levels."""

    baseline: str
    value: str  # the run figure compared: epoch_time_median_s or epoch_time_mean_s
    confidence: float
    alpha: float
    margin: float  # the practical tie, e.g. 0.02


class Bound(NamedTuple):
    """The upper bound's figures for a fraction, from the same testbed and batch size; None where none matches."""

    img_s: float | None = None
    compute_s: float | None = None


NO_BOUND = Bound()


def comparison_columns(f: model.Fit, how: Comparison) -> pd.DataFrame:
    """The verdict's columns (`wif.decide.decision.decide`), the model's estimate named as the table names it."""
    columns = decision.columns(f, how.baseline, how.confidence, how.margin, how.alpha)
    return columns.rename(columns={"time_s": "model_time_s"})


@dataclass(frozen=True)
class Sensitivity:
    """The answer again without the flagged outliers, for the reader to see whether they move it."""

    left_out: pd.DataFrame  # the outlier runs: run_id, loader, block, value, z
    possibly_fastest: list[str]
    significant: dict[str, bool]  # per loader against the baseline
    fit: model.Fit


@dataclass
class FractionSummary:
    """Everything the report says about one fraction on one testbed."""

    fraction: float
    table: pd.DataFrame  # indexed by loader, fastest first (by the model's estimate)
    fit: model.Fit
    baseline: str
    value: str  # the run figure compared: epoch_time_median_s or epoch_time_mean_s
    margin: float
    missing: dict[str, list[str]]  # incomplete blocks and the loaders they lack
    sensitivity: Sensitivity | None = None  # None: no outliers flagged
    notes: list[str] = field(default_factory=list)
    confidence: float = 0.95
    race: Any = None  # a wif.report.testbed.RaceAnswer when the runs are one race's: 'vs fastest' is its answer

    @property
    def possibly_fastest(self) -> list[str]:
        return list(self.table.index[self.table["possibly_fastest"].fillna(False).astype(bool)])


def summarize_fraction(
    runs: pd.DataFrame, metrics: Sequence[str], how: Comparison, bound: Bound = NO_BOUND
) -> FractionSummary:
    """The table, the model's comparisons and the outlier check of one fraction.

    Args:
        runs: the fraction's usable runs on one testbed.
        metrics: the run figures whose means the table shows.
        how: the baseline, the run figure and the levels of the comparison.
        bound: the references of 'of bound' and 'step vs bound'.
    """
    f = model.fit(runs, how.value, how.baseline)
    table = summarize_cells(runs, how.value, metrics, how.confidence)
    table = table.join(comparison_columns(f, how)).sort_values("model_time_s")
    if bound.img_s:
        table["bound_share"] = table[names.THROUGHPUT_MEAN_IMG_S] / bound.img_s
    if bound.compute_s:  # the loader's host work slowing the step: its interference (wif.advisor.limit)
        table["step_vs_bound"] = table[names.COMPUTE_MEAN_S] / bound.compute_s - 1
    summary = FractionSummary(
        fraction=float(runs["fraction"].iloc[0]),
        table=table,
        fit=f,
        baseline=how.baseline,
        value=how.value,
        margin=how.margin,
        missing=missing_in_blocks(runs, how.value),
        confidence=how.confidence,
    )
    flagged = model.outliers(runs, how.value)
    if not flagged.empty:
        summary.sensitivity = _without(runs, flagged, how)
    return summary


def _without(runs: pd.DataFrame, flagged: pd.Series, how: Comparison) -> Sensitivity:
    """The answer again with the `flagged` runs left out; `flagged` holds their robust z-scores."""
    left_out = runs.loc[flagged.index, ["run_id", "loader", "block", how.value]].assign(z=flagged)
    f = model.fit(runs.drop(flagged.index), how.value, how.baseline)
    columns = comparison_columns(f, how)
    fastest = list(columns.index[columns["possibly_fastest"].fillna(False).astype(bool)])
    order = np.argsort([f.estimate[f.index(name)] for name in fastest])
    return Sensitivity(
        left_out=left_out, possibly_fastest=[fastest[i] for i in order], significant=significance(columns), fit=f
    )


def significance(table: pd.DataFrame) -> dict[str, bool]:
    """Each setting's verdict against the baseline, leaving out those that could not be tested."""
    return {name: bool(v) for name, v in table["significant"].items() if v is not None and not pd.isna(v)}
