"""What every chart of the report shares: the loaders' order and axis, sizes, colours, empty panels, labels.

Loaders keep one order everywhere, fastest first at the largest fraction, named along the vertical axis.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from wif.measure import names  # noqa: E402
from wif.report.stats import FractionSummary  # noqa: E402

LABEL_INCH_PER_CHAR = 0.075  # room a loader name takes beside an axis, at the default tick font
BAR_INCH = 0.16  # height of one bar in the bar charts


def loader_order(summaries: Sequence[FractionSummary]) -> list[str]:
    """Fastest first at the largest fraction, then any loader that only ran at other fractions."""
    order: list[str] = []
    for s in sorted(summaries, key=lambda s: -s.fraction):
        order += [name for name in s.table.index if name not in order]
    return order


def loader_axis(ax: Axes, loaders: Sequence[str], labels: bool = True) -> None:
    """Loaders down the vertical axis, the first (fastest) at the top."""
    ax.set_yticks(range(len(loaders)))
    ax.set_yticklabels(loaders if labels else [])
    ax.set_ylim(len(loaders) - 0.5, -0.5)


def label_inches(loaders: Sequence[str]) -> float:
    """Width the longest loader name needs beside an axis."""
    return LABEL_INCH_PER_CHAR * max((len(name) for name in loaders), default=0)


def bar_chart_height(loaders: Sequence[str], bars_per_loader: int) -> float:
    """Figure height that gives every bar the same room however many loaders there are."""
    return max(4.0, 1.6 + len(loaders) * (bars_per_loader + 0.6) * BAR_INCH)


def statistic_word(summaries: Sequence[FractionSummary]) -> str:
    """The run figure's word for axis labels: 'medians' or 'means'."""
    return "medians" if summaries[0].value == names.EPOCH_TIME_MEDIAN_S else "means"


def empty_panel(ax: Axes, message: str) -> None:
    """A panel with nothing to draw: `message` in its middle, no ticks."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=13, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def fraction_colors(summaries: Sequence[FractionSummary]) -> dict[float, tuple]:
    """One colour per fraction, the same in every chart."""
    fractions = sorted(s.fraction for s in summaries)
    cmap = plt.get_cmap("viridis")
    return {f: cmap(0.15 + 0.7 * i / max(len(fractions) - 1, 1)) for i, f in enumerate(fractions)}


def label_points(ax: Axes, labels: Sequence[str], x: np.ndarray, y: np.ndarray, fontsize: float = 8) -> None:
    """Names beside their points, each moved up or down in steps until it overlaps no earlier label.

    Positions are measured in points on the figure as laid out when called.

    Args:
        ax: where the points are.
        labels: one name per point.
        x: the points' x.
        y: the points' y.
        fontsize: the names' size, in points.
    """
    scale = 72 / ax.figure.dpi
    step = fontsize + 2
    placed: list[tuple[float, float, float, float]] = []
    for i in np.argsort(x):
        px, py = ax.transData.transform((x[i], y[i])) * scale
        width = 0.62 * fontsize * len(labels[i])
        for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8):
            box = (px + 4, py + k * step, px + 4 + width, py + k * step + step)
            if not any(b[0] < box[2] and box[0] < b[2] and b[1] < box[3] and box[1] < b[3] for b in placed):
                break
        placed.append(box)
        ax.annotate(
            labels[i],
            (x[i], y[i]),
            xytext=(4, box[1] - py),
            textcoords="offset points",
            fontsize=fontsize,
            va="bottom",
            arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5} if box[1] != py else None,
        )
