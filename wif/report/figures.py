"""The report's PNG files for one testbed: one per question, plus an overview that puts the main four side
by side, each sized to its number of loaders and fractions (the drawing itself is `plots`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from wif.report.plots import (  # noqa: E402
    bar_chart_height,
    curves_shown,
    draw_curves,
    draw_drift,
    draw_epoch_times,
    draw_memory,
    draw_speedup_heatmap,
    draw_tradeoff,
    label_inches,
    loader_order,
)
from wif.report.stats import FractionSummary  # noqa: E402

DPI = 120


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(
    out: Path,
    suffix: str,
    testbed: str,
    summaries: Sequence[FractionSummary],
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    curve_fraction: float,
    memory: tuple[str, str],
    confidence: float,
    alpha: float,
) -> list[Path]:
    """Every PNG of one testbed; `memory` names the RAM and VRAM columns used for the trade-off."""
    ram_column, vram_column = memory
    loaders, widest = loader_order(summaries), max(summaries, key=lambda s: s.fraction)
    n, names = len(summaries), label_inches(loaders)
    bars_h, row_h = bar_chart_height(loaders, n), bar_chart_height(loaders, 1)  # row_h: one slot per loader
    curve_names = label_inches(curves_shown(curves, loaders, widest.baseline)[0])
    trade_columns = [(ram_column, "peak RAM")] + (
        [(vram_column, "peak VRAM")] if runs[vram_column].notna().any() else []
    )

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
        single("epoch_time", "", (8 + names, bars_h), lambda f: draw_epoch_times(f.subplots(), summaries, confidence)),
        single(
            "speedup_heatmap",
            "",
            (3 + 1.5 * n + names, row_h),
            lambda f: draw_speedup_heatmap(f.subplots(), summaries, alpha),
        ),
        single(
            "vram",
            "Peak VRAM per loader",
            (names + 4 * n, row_h),
            lambda f: draw_memory(grid(1, n, f)[0], summaries, "VRAM"),
        ),
        single(
            "ram",
            "Peak RAM per loader, worker processes included",
            (names + 4 * n, row_h),
            lambda f: draw_memory(grid(1, n, f)[0], summaries, "RAM"),
        ),
        single(
            "time_vs_memory",
            "Speed against memory",
            (6 * n, 5 * len(trade_columns)),
            lambda f: [
                draw_tradeoff(ax, s, column, label)
                for row, (column, label) in zip(grid(len(trade_columns), n, f), trade_columns)
                for ax, s in zip(row, sorted(summaries, key=lambda s: s.fraction))
            ],
        ),
        single(
            "epoch_curves",
            "",
            (10 + curve_names, 5),
            lambda f: draw_curves(f.subplots(), curves, curve_fraction, loaders, widest.baseline),
        ),
        single("drift", "", (10, 5), lambda f: draw_drift(f.subplots(), runs, widest.baseline, summaries)),
    ]

    def overview(fig: plt.Figure) -> list[Callable[[], None]]:
        (a, b), (c, d) = fig.subplots(2, 2, gridspec_kw={"height_ratios": [top_h, 5.0]})
        draw_epoch_times(a, summaries, confidence)
        draw_speedup_heatmap(b, summaries, alpha)
        draw_curves(d, curves, curve_fraction, loaders, widest.baseline)
        return [draw_tradeoff(c, widest, *trade_columns[0])]

    top_h = max(bars_h, row_h)
    return paths + [single("overview", "Who is faster", (16 + 2 * names + curve_names, top_h + 6), overview)]
