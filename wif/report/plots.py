"""The report's pictures: each `draw_*` function draws one question on a given Axes.

The same picture serves its own PNG and the overview (`figures`). What every chart shares is `chart`'s.
Figures grow with the number of loaders, so a study of 48 cells stays readable.
"""

from __future__ import annotations

from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter  # noqa: E402

from wif.report.chart import (  # noqa: E402
    empty_panel,
    fraction_colors,
    label_points,
    loader_axis,
    loader_order,
    statistic_word,
)
from wif.report.stats import FractionSummary, pareto_mask  # noqa: E402
from wif.report.verdicts import RAM_COLUMNS, VRAM_COLUMNS  # noqa: E402

LABEL_ALL_MAX = 15  # the time-vs-memory chart names every point up to this many; beyond, the frontier only
CURVES_MAX = 12  # epoch-time curves drawn at most (the main study has 11); beyond, spread over the speed order
RAM_SERIES = ("rss", "pss", "uss")  # drawn nested, widest (largest) first
VRAM_SERIES = ("device", "reserved", "allocated")
HEATMAP_MIN_SPREAD = 1.5  # the colour scale spans at least 1/1.5x .. 1.5x


def draw_epoch_times(ax: Axes, summaries: Sequence[FractionSummary], confidence: float) -> None:
    """Mean epoch time per loader, one bar per fraction, error bars the confidence interval."""
    loaders, colors = loader_order(summaries), fraction_colors(summaries)
    width = 0.8 / len(summaries)
    for i, s in enumerate(sorted(summaries, key=lambda s: s.fraction)):
        t = s.table.reindex(loaders)
        y = np.arange(len(loaders)) + (i - (len(summaries) - 1) / 2) * width
        err = (t["time_ci_high_s"] - t["time_ci_low_s"]).to_numpy() / 2
        ax.barh(
            y,
            t["time_s"],
            width,
            xerr=np.nan_to_num(err),
            capsize=2,
            color=colors[s.fraction],
            label=f"fraction {s.fraction:g}",
        )
    loader_axis(ax, loaders)
    ax.set_xlabel(f"epoch time (s): mean of the runs' {statistic_word(summaries)}")
    ax.set_title(f"Epoch time per loader (warm-up excluded, {confidence:.0%} CI)")
    ax.legend(loc="best")
    ax.grid(axis="x", alpha=0.3)


def draw_speedup_heatmap(ax: Axes, summaries: Sequence[FractionSummary], alpha: float) -> None:
    """Speedup against baseline per loader and fraction; * marks a significant difference."""
    loaders = loader_order(summaries)
    ordered = sorted(summaries, key=lambda s: s.fraction)
    values = np.array([[s.table["speedup"].get(name, np.nan) for s in ordered] for name in loaders], dtype=float)
    if np.isnan(values).all():
        empty_panel(ax, f"no {summaries[0].baseline} runs: no speedups")
        return
    # Symmetric on a log scale (2x and 0.5x alike), never so narrow that a small speedup looks large.
    spread = max(np.nanmax(values), 1 / np.nanmin(values), HEATMAP_MIN_SPREAD)
    norm = LogNorm(vmin=1 / spread, vmax=spread)
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto")
    for (row, col), value in np.ndenumerate(values):
        p = ordered[col].table["p_adj"].get(loaders[row], np.nan)
        mark = "*" if p is not None and p < alpha else ""
        ax.text(col, row, "n/a" if np.isnan(value) else f"{value:.2f}x{mark}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(ordered)))
    ax.set_xticklabels([f"{s.fraction:g}" for s in ordered])
    loader_axis(ax, loaders)
    ax.set_xlabel("data fraction")
    ax.set_title(f"Speedup vs {summaries[0].baseline} (* significant, simultaneous, alpha={alpha:g})")
    bar = ax.figure.colorbar(image, ax=ax, label=f"{summaries[0].baseline} time / loader time")
    ticks = [1 / spread, spread**-0.5, 1.0, spread**0.5, spread]
    bar.set_ticks(ticks, labels=[f"{v:.3g}x" for v in ticks])
    bar.ax.yaxis.set_minor_formatter(NullFormatter())


def draw_nested_bars(ax: Axes, s: FractionSummary, loaders: Sequence[str], series: dict[str, str]) -> bool:
    """Bars of several figures per loader drawn inside one another, largest first; False when none is present.

    Args:
        ax: where to draw.
        s: the fraction's summary.
        loaders: the loaders, in the order drawn.
        series: label -> column of the figures drawn.
    """
    t = s.table.reindex(loaders)
    present = {label: column for label, column in series.items() if column in t and t[column].notna().any()}
    for i, (label, column) in enumerate(present.items()):
        ax.barh(
            range(len(loaders)),
            t[column].fillna(0),
            0.8 * (1 - 0.3 * i),
            label=label,
            color=plt.get_cmap("Blues")(0.35 + 0.25 * i),
        )
    return bool(present)


def draw_memory(axes: Sequence[Axes], summaries: Sequence[FractionSummary], kind: str) -> None:
    """Peak RAM or VRAM per loader, one panel per fraction, the kinds of peak nested."""
    kinds, columns = (RAM_SERIES, RAM_COLUMNS) if kind == "RAM" else (VRAM_SERIES, VRAM_COLUMNS)
    series = {name.upper() if kind == "RAM" else name: columns[name] for name in kinds}
    loaders = loader_order(summaries)
    for i, (ax, s) in enumerate(zip(axes, sorted(summaries, key=lambda s: s.fraction))):
        if not draw_nested_bars(ax, s, loaders, series):
            empty_panel(ax, "no CUDA runs" if kind == "VRAM" else f"no {kind} figures")
            continue
        loader_axis(ax, loaders, labels=i == 0)  # the panels share one loader axis
        ax.set_title(f"fraction {s.fraction:g}")
        ax.set_xlabel(f"peak {kind} (MB)")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="best")


def draw_tradeoff(ax: Axes, s: FractionSummary, column: str, label: str) -> Callable[[], None]:
    """Epoch time against peak memory, the Pareto frontier in red: nothing both faster and leaner.

    Returns the labelling of the points, to call once the whole figure is laid out. Beyond
    LABEL_ALL_MAX points only the frontier and the baseline are named: dozens of names cover the points.

    Args:
        ax: where to draw.
        s: the fraction's summary.
        column: the memory figure.
        label: its name on the axis.
    """
    t = s.table.dropna(subset=[column])
    if t.empty:
        empty_panel(ax, "no CUDA runs" if column.startswith("vram") else f"no {label} figures")
        return lambda: None
    x, y = t["time_s"].to_numpy(), t[column].to_numpy()
    front = pareto_mask(x, y)
    named = np.ones_like(front) if len(t) <= LABEL_ALL_MAX else front | (t.index == s.baseline)
    ax.scatter(x[~front], y[~front], color="0.5", label="dominated" if named.all() else "dominated (unnamed)")
    ax.scatter(x[front], y[front], color="tab:red", label="Pareto frontier")
    order = np.argsort(x[front])
    ax.plot(x[front][order], y[front][order], color="tab:red", drawstyle="steps-post", alpha=0.6)
    ax.set_ylim(0, 1.15 * y.max())  # from zero, so small differences in memory do not look large
    ax.set_xlabel(f"epoch time (s): mean of the runs' {statistic_word([s])}")
    ax.set_ylabel(f"{label} (MB)")
    ax.set_title(f"Time vs {label}, fraction {s.fraction:g}")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return lambda: label_points(ax, list(t.index[named]), x[named], y[named])


def curves_shown(curves: pd.DataFrame, loaders: Sequence[str], baseline: str) -> tuple[list[str], int]:
    """The loaders whose epoch curves are drawn, and how many have curves at all."""
    with_curves = set(curves["loader"]) if not curves.empty else set()
    present = [name for name in loaders if name in with_curves]
    return curve_loaders(present, baseline), len(present)


def curve_loaders(loaders: Sequence[str], baseline: str, limit: int = CURVES_MAX) -> list[str]:
    """At most `limit` loaders, spread evenly over the speed order (fastest and slowest kept) plus baseline."""
    if len(loaders) <= limit:
        return list(loaders)
    picks = {int(round(i)) for i in np.linspace(0, len(loaders) - 1, limit - (baseline in loaders))}
    return [name for i, name in enumerate(loaders) if i in picks or name == baseline]


def draw_curves(ax: Axes, curves: pd.DataFrame, fraction: float, loaders: Sequence[str], baseline: str) -> None:
    """Epoch time across epochs, mean over repeats, per loader; epoch 0, the warm-up, shaded.

    Args:
        ax: where to draw.
        curves: per-epoch times: loader, step, value.
        fraction: their fraction, for the title.
        loaders: the loaders in speed order.
        baseline: the setting always drawn.
    """
    if curves.empty:
        empty_panel(ax, "no per-epoch history")
        return
    shown, present = curves_shown(curves, loaders, baseline)
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(shown):
        mean = curves[curves["loader"] == name].groupby("step")["value"].mean()
        ax.plot(
            mean.index,
            mean.to_numpy(),
            marker=".",
            color=cmap(i % 10),
            linestyle=("-", "--", ":")[i // 10 % 3],
            label=name,
        )
    ax.axvspan(-0.5, 0.5, color="0.9", label="warm-up")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("epoch time (s)")
    some = "" if len(shown) == present else f"; {len(shown)} of {present} loaders, spread over the speed order"
    ax.set_title(f"Epoch time across epochs, fraction {fraction:g} (mean over repeats{some})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot, never over a curve
    ax.grid(alpha=0.3)


def draw_drift(ax: Axes, runs: pd.DataFrame, baseline: str, summaries: Sequence[FractionSummary]) -> None:
    """Baseline epoch time, relative to its cell's mean, against the position in the sweep; blocks shaded.

    Relative times put every fraction on one scale: a trend across the sweep means the machine drifted.

    Args:
        ax: where to draw.
        runs: the testbed's runs.
        baseline: the setting drawn.
        summaries: its fractions, for their colours and the run figure.
    """
    base = runs[(runs["loader"] == baseline) & runs["sweep_pos"].notna()]
    if base.empty:
        empty_panel(ax, f"no {baseline} runs with wif.sweep_pos")
        return
    spans = runs.dropna(subset=["sweep_pos", "block"]).groupby("block")["sweep_pos"].agg(["min", "max"])
    for i, (block, span) in enumerate(spans.sort_values("min").iterrows()):
        ax.axvspan(span["min"] - 0.5, span["max"] + 0.5, color="0.93" if i % 2 == 0 else "white", zorder=0)
        ax.text(
            (span["min"] + span["max"]) / 2,
            1.0,
            f"block {block}",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            color="0.4",
        )
    colors, value = fraction_colors(summaries), summaries[0].value
    for fraction, group in base.sort_values("sweep_pos").groupby("fraction"):
        relative = group[value] / group[value].mean()
        ax.plot(
            group["sweep_pos"],
            relative,
            marker="o",
            color=colors.get(fraction, "0.5"),
            label=f"fraction {fraction:g} (mean {group[value].mean():.3g} s)",
        )
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xlabel("position in the sweep (wif.sweep_pos)")
    ax.set_ylabel(f"{baseline} epoch time / its cell mean")
    ax.set_title(f"Drift: {baseline} epoch time across the sweep", pad=16)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
