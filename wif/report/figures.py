"""The report's PNG files for one testbed: one per question, plus an overview of the main four side by side.

Each figure is sized to its number of loaders and fractions. The drawing itself is `plots`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from wif.report.chart import bar_chart_height, label_inches, loader_order  # noqa: E402
from wif.report.plots import (  # noqa: E402
    curves_shown,
    draw_curves,
    draw_drift,
    draw_epoch_times,
    draw_memory,
    draw_speedup_heatmap,
    draw_tradeoff,
)
from wif.report.stats import FractionSummary  # noqa: E402

DPI = 120

Draw = Callable[[plt.Figure], Optional[list]]  # may return label placements, done once the figure is laid out


@dataclass(frozen=True)
class PlotInputs:
    """What one testbed's plots are drawn from."""

    testbed: str
    summaries: Sequence[FractionSummary]
    runs: pd.DataFrame
    curves: pd.DataFrame  # per-epoch times at `curve_fraction`, labelled by loader
    curve_fraction: float
    ram_column: str  # the RAM figure of the trade-off plot
    vram_column: str  # and the VRAM one
    confidence: float
    alpha: float


@dataclass(frozen=True)
class Layout:
    """The sizes every figure of a testbed shares, from its loaders and fractions."""

    loaders: list[str]  # fastest first
    widest: FractionSummary  # the largest fraction
    n: int  # fractions
    names: float  # inches the loader names take beside an axis
    bars_h: float  # height of a bar chart with one bar per fraction
    row_h: float  # height of a chart with one slot per loader
    curve_names: float  # inches the names of the curves drawn take
    trade_columns: list[tuple[str, str]]  # (column, label) of the trade-off rows: RAM, and VRAM where measured


class Figure(NamedTuple):
    """One PNG: its file name, its title, its size in inches and what draws it."""

    name: str
    title: str
    size: tuple[float, float]
    draw: Draw


def write_plots(out: Path, suffix: str, inputs: PlotInputs) -> list[Path]:
    """Write every PNG of one testbed to `out`, each name ending in `suffix`; return their paths."""
    layout = _layout(inputs)
    figures = _questions(inputs, layout) + [_overview(inputs, layout)]
    return [_write(figure, inputs.testbed, out / f"{figure.name}{suffix}.png") for figure in figures]


def _layout(inputs: PlotInputs) -> Layout:
    summaries, runs = inputs.summaries, inputs.runs
    loaders, widest = loader_order(summaries), max(summaries, key=lambda s: s.fraction)
    return Layout(
        loaders=loaders,
        widest=widest,
        n=len(summaries),
        names=label_inches(loaders),
        bars_h=bar_chart_height(loaders, len(summaries)),
        row_h=bar_chart_height(loaders, 1),
        curve_names=label_inches(curves_shown(inputs.curves, loaders, widest.baseline)[0]),
        trade_columns=[(inputs.ram_column, "peak RAM")]
        + ([(inputs.vram_column, "peak VRAM")] if runs[inputs.vram_column].notna().any() else []),
    )


def _write(figure: Figure, testbed: str, path: Path) -> Path:
    """Draw one figure, place its labels once it is laid out, and save it."""
    fig = plt.figure(figsize=figure.size, layout="tight")
    fig.suptitle(f"{figure.title} ({testbed})" if figure.title else testbed, fontsize=12)
    pending = figure.draw(fig) or []
    if pending:
        fig.draw_without_rendering()
    for place in pending:
        place()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _grid(rows: int, cols: int, fig: plt.Figure) -> np.ndarray:
    return fig.subplots(rows, cols, squeeze=False)


def _questions(inputs: PlotInputs, at: Layout) -> list[Figure]:
    """One figure per question, in the order the files are written."""
    summaries, curves, baseline = inputs.summaries, inputs.curves, at.widest.baseline
    by_fraction = sorted(summaries, key=lambda s: s.fraction)
    memory_size = (at.names + 4 * at.n, at.row_h)
    return [
        Figure(
            name="epoch_time",
            title="",
            size=(8 + at.names, at.bars_h),
            draw=lambda f: draw_epoch_times(f.subplots(), summaries, inputs.confidence),
        ),
        Figure(
            name="speedup_heatmap",
            title="",
            size=(3 + 1.5 * at.n + at.names, at.row_h),
            draw=lambda f: draw_speedup_heatmap(f.subplots(), summaries, inputs.alpha),
        ),
        Figure(
            name="vram",
            title="Peak VRAM per loader",
            size=memory_size,
            draw=lambda f: draw_memory(_grid(1, at.n, f)[0], summaries, "VRAM"),
        ),
        Figure(
            name="ram",
            title="Peak RAM per loader, worker processes included",
            size=memory_size,
            draw=lambda f: draw_memory(_grid(1, at.n, f)[0], summaries, "RAM"),
        ),
        Figure(
            name="time_vs_memory",
            title="Speed against memory",
            size=(6 * at.n, 5 * len(at.trade_columns)),
            draw=lambda f: [
                draw_tradeoff(ax, s, column, label)
                for row, (column, label) in zip(_grid(len(at.trade_columns), at.n, f), at.trade_columns)
                for ax, s in zip(row, by_fraction)
            ],
        ),
        Figure(
            name="epoch_curves",
            title="",
            size=(10 + at.curve_names, 5),
            draw=lambda f: draw_curves(f.subplots(), curves, inputs.curve_fraction, at.loaders, baseline),
        ),
        Figure(
            name="drift",
            title="",
            size=(10, 5),
            draw=lambda f: draw_drift(f.subplots(), inputs.runs, baseline, summaries),
        ),
    ]


def _overview(inputs: PlotInputs, at: Layout) -> Figure:
    """The main four questions side by side: times, speedups, the trade-off at the widest fraction, curves."""
    top_h = max(at.bars_h, at.row_h)

    def draw(fig: plt.Figure) -> list[Callable[[], None]]:
        (a, b), (c, d) = fig.subplots(2, 2, gridspec_kw={"height_ratios": [top_h, 5.0]})
        draw_epoch_times(a, inputs.summaries, inputs.confidence)
        draw_speedup_heatmap(b, inputs.summaries, inputs.alpha)
        draw_curves(d, inputs.curves, inputs.curve_fraction, at.loaders, at.widest.baseline)
        return [draw_tradeoff(c, at.widest, *at.trade_columns[0])]

    size = (16 + 2 * at.names + at.curve_names, top_h + 6)
    return Figure(name="overview", title="Who is faster", size=size, draw=draw)
