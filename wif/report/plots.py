"""The report's pictures, one PNG per question, plus an overview that puts the main four side by side.

Each `draw_*` function draws on a given Axes so the same picture serves both the single PNG and the
overview. Loaders keep one order everywhere: fastest first at the largest fraction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter  # noqa: E402

from wif.report.runs import TIME  # noqa: E402
from wif.report.stats import FractionSummary, pareto_mask  # noqa: E402
from wif.report.tables import RAM_COLUMNS, VRAM_COLUMNS  # noqa: E402

DPI = 120
LABEL_ROTATION = 35
RAM_SERIES = ("rss", "pss", "uss")  # drawn nested, widest (largest) first
VRAM_SERIES = ("device", "reserved", "allocated")
HEATMAP_MIN_SPREAD = 1.5  # the colour scale spans at least 1/1.5x .. 1.5x


def loader_order(summaries: Sequence[FractionSummary]) -> list[str]:
    """Fastest first at the largest fraction, then any loader that only ran at other fractions."""
    order: list[str] = []
    for s in sorted(summaries, key=lambda s: -s.fraction):
        order += [name for name in s.table.index if name not in order]
    return order


def _loader_axis(ax: Axes, loaders: Sequence[str]) -> None:
    ax.set_xticks(range(len(loaders)))
    ax.set_xticklabels(loaders, rotation=LABEL_ROTATION, ha="right")


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=13, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _fraction_colors(summaries: Sequence[FractionSummary]) -> dict[float, tuple]:
    fractions = sorted(s.fraction for s in summaries)
    cmap = plt.get_cmap("viridis")
    return {f: cmap(0.15 + 0.7 * i / max(len(fractions) - 1, 1)) for i, f in enumerate(fractions)}


def draw_epoch_times(ax: Axes, summaries: Sequence[FractionSummary], confidence: float) -> None:
    """Mean epoch time per loader, one bar per fraction, error bars the confidence interval."""
    loaders, colors = loader_order(summaries), _fraction_colors(summaries)
    width = 0.8 / len(summaries)
    for i, s in enumerate(sorted(summaries, key=lambda s: s.fraction)):
        t = s.table.reindex(loaders)
        x = np.arange(len(loaders)) + (i - (len(summaries) - 1) / 2) * width
        err = (t["epoch_time_ci_high_s"] - t["epoch_time_ci_low_s"]).to_numpy() / 2
        ax.bar(x, t["epoch_time_mean_s"], width, yerr=np.nan_to_num(err), capsize=2,
               color=colors[s.fraction], label=f"fraction {s.fraction:g}")
    _loader_axis(ax, loaders)
    ax.set_ylabel("mean epoch time (s)")
    ax.set_title(f"Epoch time per loader (warm-up excluded, {confidence:.0%} CI)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)


def draw_speedup_heatmap(ax: Axes, summaries: Sequence[FractionSummary], alpha: float) -> None:
    """Speedup against baseline per loader and fraction; * marks a significant difference."""
    loaders = loader_order(summaries)
    ordered = sorted(summaries, key=lambda s: s.fraction)
    values = np.array([[s.table["speedup"].get(name, np.nan) for s in ordered] for name in loaders], dtype=float)
    if np.isnan(values).all():
        _empty(ax, f"no {summaries[0].baseline} runs: no speedups")
        return
    # Symmetric on a log scale (2x and 0.5x alike), never so narrow that a small speedup looks large.
    spread = max(np.nanmax(values), 1 / np.nanmin(values), HEATMAP_MIN_SPREAD)
    norm = LogNorm(vmin=1 / spread, vmax=spread)
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto")
    for (row, col), value in np.ndenumerate(values):
        p = ordered[col].table["p_holm"].get(loaders[row], np.nan)
        mark = "*" if p < alpha else ""
        ax.text(col, row, "n/a" if np.isnan(value) else f"{value:.2f}x{mark}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(ordered)))
    ax.set_xticklabels([f"{s.fraction:g}" for s in ordered])
    ax.set_yticks(range(len(loaders)))
    ax.set_yticklabels(loaders)
    ax.set_xlabel("data fraction")
    ax.set_title(f"Speedup vs {summaries[0].baseline} (* significant, Holm, alpha={alpha:g})")
    bar = ax.figure.colorbar(image, ax=ax, label=f"{summaries[0].baseline} time / loader time")
    bar.set_ticks([1 / spread, spread ** -0.5, 1.0, spread**0.5, spread], labels=[
        f"{v:.3g}x" for v in (1 / spread, spread ** -0.5, 1.0, spread**0.5, spread)])
    bar.ax.yaxis.set_minor_formatter(NullFormatter())


def draw_nested_bars(ax: Axes, s: FractionSummary, loaders: Sequence[str], series: dict[str, str]) -> bool:
    """Bars of several figures per loader drawn inside one another (largest first); False when none present."""
    t = s.table.reindex(loaders)
    present = {label: column for label, column in series.items() if column in t and t[column].notna().any()}
    for i, (label, column) in enumerate(present.items()):
        ax.bar(range(len(loaders)), t[column].fillna(0), 0.8 * (1 - 0.3 * i), label=label,
               color=plt.get_cmap("Blues")(0.35 + 0.25 * i))
    return bool(present)


def draw_memory(axes: Sequence[Axes], summaries: Sequence[FractionSummary], kind: str) -> None:
    """Peak RAM or VRAM per loader, one panel per fraction, the kinds of peak nested."""
    names, columns = (RAM_SERIES, RAM_COLUMNS) if kind == "RAM" else (VRAM_SERIES, VRAM_COLUMNS)
    series = {name.upper() if kind == "RAM" else name: columns[name] for name in names}
    loaders = loader_order(summaries)
    for ax, s in zip(axes, sorted(summaries, key=lambda s: s.fraction)):
        if not draw_nested_bars(ax, s, loaders, series):
            _empty(ax, "no CUDA runs" if kind == "VRAM" else f"no {kind} figures")
            continue
        _loader_axis(ax, loaders)
        ax.set_title(f"fraction {s.fraction:g}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"peak {kind} (MB)")


def draw_tradeoff(ax: Axes, s: FractionSummary, column: str, label: str) -> Callable[[], None]:
    """Epoch time against peak memory, Pareto frontier (nothing both faster and leaner) in red.

    Returns the labelling of the points, to call once the whole figure is laid out.
    """
    t = s.table.dropna(subset=[column])
    if t.empty:
        _empty(ax, "no CUDA runs" if column.startswith("vram") else f"no {label} figures")
        return lambda: None
    x, y = t["epoch_time_mean_s"].to_numpy(), t[column].to_numpy()
    front = pareto_mask(x, y)
    ax.scatter(x[~front], y[~front], color="0.5", label="dominated")
    ax.scatter(x[front], y[front], color="tab:red", label="Pareto frontier")
    order = np.argsort(x[front])
    ax.plot(x[front][order], y[front][order], color="tab:red", drawstyle="steps-post", alpha=0.6)
    ax.set_ylim(0, 1.15 * y.max())  # from zero, so small differences in memory do not look large
    ax.set_xlabel("mean epoch time (s)")
    ax.set_ylabel(f"{label} (MB)")
    ax.set_title(f"Time vs {label}, fraction {s.fraction:g}")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return lambda: label_points(ax, list(t.index), x, y)


def label_points(ax: Axes, names: Sequence[str], x: np.ndarray, y: np.ndarray, fontsize: float = 8) -> None:
    """Names beside their points, each moved up or down in steps until it overlaps no earlier label.

    Positions are measured in points on the figure as laid out when called.
    """
    scale = 72 / ax.figure.dpi
    step = fontsize + 2
    placed: list[tuple[float, float, float, float]] = []
    for i in np.argsort(x):
        px, py = ax.transData.transform((x[i], y[i])) * scale
        width = 0.62 * fontsize * len(names[i])
        for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8):
            box = (px + 4, py + k * step, px + 4 + width, py + k * step + step)
            if not any(b[0] < box[2] and box[0] < b[2] and b[1] < box[3] and box[1] < b[3] for b in placed):
                break
        placed.append(box)
        ax.annotate(names[i], (x[i], y[i]), xytext=(4, box[1] - py), textcoords="offset points", fontsize=fontsize,
                    va="bottom", arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5} if box[1] != py else None)


def draw_curves(ax: Axes, curves: pd.DataFrame, fraction: float, loaders: Sequence[str]) -> None:
    """Epoch time across epochs, mean over repeats, per loader; epoch 0 (warm-up) shaded."""
    if curves.empty:
        _empty(ax, "no per-epoch history")
        return
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(n for n in loaders if n in set(curves["loader"])):
        mean = curves[curves["loader"] == name].groupby("step")["value"].mean()
        ax.plot(mean.index, mean.to_numpy(), marker=".", color=cmap(i % 10), linestyle=("-", "--", ":")[i // 10 % 3],
                label=name)
    ax.axvspan(-0.5, 0.5, color="0.9", label="warm-up")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("epoch time (s)")
    ax.set_title(f"Epoch time across epochs, fraction {fraction:g} (mean over repeats)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def draw_drift(ax: Axes, runs: pd.DataFrame, baseline: str, summaries: Sequence[FractionSummary]) -> None:
    """Baseline epoch time, relative to its cell's mean, against the position in the sweep; blocks shaded.

    Relative times put every fraction on one scale: a trend across the sweep means the machine drifted.
    """
    base = runs[(runs["loader"] == baseline) & runs["sweep_pos"].notna()]
    if base.empty:
        _empty(ax, f"no {baseline} runs with wif.sweep_pos")
        return
    spans = runs.dropna(subset=["sweep_pos", "block"]).groupby("block")["sweep_pos"].agg(["min", "max"])
    for i, (block, span) in enumerate(spans.sort_values("min").iterrows()):
        ax.axvspan(span["min"] - 0.5, span["max"] + 0.5, color="0.93" if i % 2 == 0 else "white", zorder=0)
        ax.text((span["min"] + span["max"]) / 2, 1.0, f"block {block}", transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8, color="0.4")
    colors = _fraction_colors(summaries)
    for fraction, group in base.sort_values("sweep_pos").groupby("fraction"):
        relative = group[TIME] / group[TIME].mean()
        ax.plot(group["sweep_pos"], relative, marker="o", color=colors.get(fraction, "0.5"),
                label=f"fraction {fraction:g} (mean {group[TIME].mean():.3g} s)")
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xlabel("position in the sweep (wif.sweep_pos)")
    ax.set_ylabel(f"{baseline} epoch time / its cell mean")
    ax.set_title(f"Drift: {baseline} epoch time across the sweep", pad=16)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(
    out: Path, suffix: str, testbed: str, summaries: Sequence[FractionSummary], runs: pd.DataFrame,
    curves: pd.DataFrame, curve_fraction: float, memory: tuple[str, str], confidence: float, alpha: float,
) -> list[Path]:
    """Every PNG of one testbed; `memory` names the RAM and VRAM columns used for the trade-off."""
    ram_column, vram_column = memory
    loaders, widest = loader_order(summaries), max(summaries, key=lambda s: s.fraction)
    n, w = len(summaries), max(8.0, 0.7 * len(loaders))
    trade_columns = [(ram_column, "peak RAM")] + (
        [(vram_column, "peak VRAM")] if runs[vram_column].notna().any() else [])

    def single(name: str, title: str, size: tuple[float, float], draw: Callable[[plt.Figure], list | None]) -> Path:
        """One figure; `draw` may return label placements, done once the figure is laid out."""
        fig = plt.figure(figsize=size, layout="tight")
        fig.suptitle(f"{title} ({testbed})" if title else testbed, fontsize=12)
        pending = draw(fig) or []
        if pending:
            fig.draw_without_rendering()
        for place in pending:
            place()
        return _save(fig, out / f"{name}{suffix}.png")

    def grid(rows: int, cols: int, fig: plt.Figure) -> np.ndarray:
        return fig.subplots(rows, cols, squeeze=False)

    paths = [
        single("epoch_time", "", (w, 5), lambda f: draw_epoch_times(f.subplots(), summaries, confidence)),
        single("speedup_heatmap", "", (3 + 1.5 * n, 1.5 + 0.45 * len(loaders)),
               lambda f: draw_speedup_heatmap(f.subplots(), summaries, alpha)),
        single("vram", "Peak VRAM per loader", (5 * n, 5),
               lambda f: draw_memory(grid(1, n, f)[0], summaries, "VRAM")),
        single("ram", "Peak RAM per loader, worker processes included", (5 * n, 5),
               lambda f: draw_memory(grid(1, n, f)[0], summaries, "RAM")),
        single("time_vs_memory", "Speed against memory", (6 * n, 5 * len(trade_columns)), lambda f: [
            draw_tradeoff(ax, s, column, label)
            for row, (column, label) in zip(grid(len(trade_columns), n, f), trade_columns)
            for ax, s in zip(row, sorted(summaries, key=lambda s: s.fraction))]),
        single("epoch_curves", "", (10, 5), lambda f: draw_curves(f.subplots(), curves, curve_fraction, loaders)),
        single("drift", "", (10, 5), lambda f: draw_drift(f.subplots(), runs, widest.baseline, summaries)),
    ]

    def overview(fig: plt.Figure) -> list[Callable[[], None]]:
        (a, b), (c, d) = grid(2, 2, fig)
        draw_epoch_times(a, summaries, confidence)
        draw_speedup_heatmap(b, summaries, alpha)
        draw_curves(d, curves, curve_fraction, loaders)
        return [draw_tradeoff(c, widest, *trade_columns[0])]

    return paths + [single("overview", "Who is faster", (max(16.0, 2 * w), 11), overview)]
