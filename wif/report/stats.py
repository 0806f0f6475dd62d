"""The statistics behind the verdicts, as pure functions on arrays and frames (no MLflow, no plotting).

Epoch times are compared as ratios (speedup = reference time / setting time), with intervals on the log
scale where ratios are symmetric. Two designs are handled: repeats in complete blocks (every setting ran
once in each pass of the sweep) are compared within blocks, which cancels drift shared by a pass; other
runs are compared as independent samples with Welch's test. P-values of a family of comparisons are
Holm-adjusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

PAIRED = "paired"  # geometric mean of within-block ratios, t-test on log ratios
WELCH = "welch"  # ratio of means with a delta-method interval, Welch's t-test


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval; the bounds are NaN when it cannot be computed."""

    estimate: float
    low: float = float("nan")
    high: float = float("nan")


@dataclass(frozen=True)
class Comparison:
    """One setting against a reference: its speedup over the reference and the test's p-value."""

    speedup: Interval
    p_value: float


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


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment; NaN p-values (untestable comparisons) stay NaN and do not count."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    order = idx[np.argsort(p[idx])]
    m = order.size
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def welch_ratio(reference: Sequence[float], other: Sequence[float], confidence: float) -> Comparison:
    """Speedup mean(reference)/mean(other) with a delta-method interval on the log ratio, Welch's test.

    The interval uses the Welch-Satterthwaite degrees of freedom of the two relative variances.
    """
    a, b = np.asarray(reference, dtype=float), np.asarray(other, dtype=float)
    ratio = float(a.mean() / b.mean())
    if a.size < 2 or b.size < 2:
        return Comparison(Interval(ratio), float("nan"))
    va = a.var(ddof=1) / (a.size * a.mean() ** 2)
    vb = b.var(ddof=1) / (b.size * b.mean() ** 2)
    if va + vb == 0.0:
        return Comparison(Interval(ratio, ratio, ratio), float("nan"))
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = stats.t.ppf((1 + confidence) / 2, df) * np.sqrt(va + vb)
    interval = Interval(ratio, float(ratio * np.exp(-half)), float(ratio * np.exp(half)))
    return Comparison(interval, float(stats.ttest_ind(a, b, equal_var=False).pvalue))


def paired_ratio(reference: Sequence[float], other: Sequence[float], confidence: float) -> Comparison:
    """Geometric mean of the within-block ratios reference/other, t-interval and t-test on their logs."""
    logs = np.log(np.asarray(reference, dtype=float) / np.asarray(other, dtype=float))
    ratio = float(np.exp(logs.mean()))
    if logs.size < 2:
        return Comparison(Interval(ratio), float("nan"))
    interval = mean_ci(logs, confidence)
    p = float(stats.ttest_1samp(logs, 0.0).pvalue) if interval.low != interval.high else float("nan")
    return Comparison(Interval(ratio, float(np.exp(interval.low)), float(np.exp(interval.high))), p)


def block_matrix(runs: pd.DataFrame, value: str = "epoch_time_mean_s") -> pd.DataFrame:
    """Blocks x loaders table of `value` (duplicates in a block averaged); NaN where a loader missed a block."""
    blocked = runs.dropna(subset=["block"])
    return blocked.pivot_table(index="block", columns="loader", values=value, aggfunc="mean")


def missing_in_blocks(runs: pd.DataFrame) -> dict[str, list[str]]:
    """For each incomplete block, the loaders of `runs` that have no usable run in it."""
    matrix = block_matrix(runs)
    return {str(block): list(row.index[row.isna()]) for block, row in matrix.iterrows() if row.isna().any()}


def blocks_complete(runs: pd.DataFrame) -> bool:
    """True when every run sits in a block where every loader of `runs` ran, and there are two blocks or more."""
    if runs["block"].isna().any():
        return False
    return len(block_matrix(runs)) >= 2 and not missing_in_blocks(runs)


def compare_all(
    runs: pd.DataFrame, reference: str, confidence: float, paired: bool, value: str = "epoch_time_mean_s"
) -> dict[str, Comparison]:
    """Every loader of `runs` (one fraction, one testbed) against `reference`, p-values Holm-adjusted."""
    others = [name for name in runs["loader"].unique() if name != reference]
    if paired:
        matrix = block_matrix(runs, value)
        raw = {name: paired_ratio(matrix[reference], matrix[name], confidence) for name in others}
    else:
        samples = {name: group[value].to_numpy() for name, group in runs.groupby("loader")}
        raw = {name: welch_ratio(samples[reference], samples[name], confidence) for name in others}
    adjusted = holm([raw[name].p_value for name in others])
    return {name: Comparison(raw[name].speedup, float(p)) for name, p in zip(others, adjusted)}


def pareto_mask(time: Sequence[float], memory: Sequence[float]) -> np.ndarray:
    """Points no other point beats on both time and memory (lower is better on both); NaNs are never on it."""
    t, m = np.asarray(time, dtype=float), np.asarray(memory, dtype=float)
    ok = ~(np.isnan(t) | np.isnan(m))
    mask = np.zeros(t.size, dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (t <= t[i]) & (m <= m[i]) & ((t < t[i]) | (m < m[i]))
        mask[i] = not dominated.any()
    return mask


def summarize_cells(runs: pd.DataFrame, metrics: Sequence[str], confidence: float) -> pd.DataFrame:
    """One row per loader: repeats, mean and interval of epoch time and throughput, means of `metrics`."""
    rows = []
    for loader, group in runs.groupby("loader", sort=False):
        time = mean_ci(group["epoch_time_mean_s"], confidence)
        row = {"loader": loader, "n": len(group), "epoch_time_mean_s": time.estimate,
               "epoch_time_ci_low_s": time.low, "epoch_time_ci_high_s": time.high,
               "epoch_time_sd_s": float(group["epoch_time_mean_s"].std(ddof=1)) if len(group) > 1 else np.nan}
        row.update({m: float(group[m].mean()) if m in group and group[m].notna().any() else np.nan for m in metrics})
        rows.append(row)
    return pd.DataFrame(rows)


def speedup_columns(comparisons: Mapping[str, Comparison], reference: str, alpha: float) -> pd.DataFrame:
    """The comparisons as frame columns indexed by loader; the reference itself gets speedup 1."""
    rows = {reference: {"speedup": 1.0}}
    for name, c in comparisons.items():
        rows[name] = {"speedup": c.speedup.estimate, "speedup_ci_low": c.speedup.low,
                      "speedup_ci_high": c.speedup.high, "p_holm": c.p_value,
                      "significant": bool(c.p_value < alpha) if not np.isnan(c.p_value) else None}
    return pd.DataFrame.from_dict(rows, orient="index")


SPEEDUP_COLUMNS = ["speedup", "speedup_ci_low", "speedup_ci_high", "p_holm", "significant"]


@dataclass
class FractionSummary:
    """Everything the report says about one fraction on one testbed."""

    fraction: float
    table: pd.DataFrame  # indexed by loader, fastest first
    method: str  # PAIRED or WELCH, for the speedups and the tests alike
    n_blocks: int  # blocks compared within (paired), else 0
    baseline: str
    vs_fastest: dict[str, Comparison]  # each other loader against the fastest: speedup < 1 means slower
    missing: dict[str, list[str]]  # incomplete blocks and the loaders they lack (why not paired)


def summarize_fraction(
    runs: pd.DataFrame, baseline: str, metrics: Sequence[str], confidence: float, alpha: float,
    bound_img_s: float | None = None,
) -> FractionSummary:
    """The table and comparisons of one fraction; paired within blocks when the blocks are complete."""
    paired = blocks_complete(runs)
    table = summarize_cells(runs, metrics, confidence).set_index("loader").sort_values("epoch_time_mean_s")
    if baseline in table.index:
        table = table.join(speedup_columns(compare_all(runs, baseline, confidence, paired), baseline, alpha))
    table = table.reindex(columns=[*table.columns.difference(SPEEDUP_COLUMNS, sort=False), *SPEEDUP_COLUMNS])
    if bound_img_s:
        table["bound_share"] = table["throughput_mean_img_s"] / bound_img_s
    fastest = table.index[0]
    return FractionSummary(
        fraction=float(runs["fraction"].iloc[0]), table=table, method=PAIRED if paired else WELCH,
        n_blocks=len(block_matrix(runs)) if paired else 0, baseline=baseline,
        vs_fastest=compare_all(runs, fastest, confidence, paired), missing=missing_in_blocks(runs),
    )
