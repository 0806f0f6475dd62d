"""trainer.epochs=auto: when a run's compared figure is pinned down, so that more epochs would tell nothing new.

The rule is pure and asked at epoch boundaries only, where the run waits anyway. The figure is the median of
the steady epochs after the warm-up; its interval and noise are `wif.run.noise`'s. With `trainer.auto_target` a
number, the run stops once that interval is within the target. With `auto`, it stops once more epochs cannot
change the comparison of cells across runs (NOTE [ The auto target ]). A run whose RAM or VRAM peak still
rises runs on to `max_epochs` and says so. Worker RAM growth (PyTorch #13246) is a finding, not noise.
"""

# NOTE [ The auto target ]
# Kalibera and Jones, "Rigorous benchmarking in reasonable time", 2013. A run stops once either holds:
# - pinned: the interval is within the auto target. That is half the report's tie margin: two runs each
#   pinned within half of it differ by less than the margin from their epochs' noise alone. Where earlier
#   runs show the cell's between-run noise larger, it is half of that noise: the run's own error then adds
#   at most ~3% to the spread of its figure across runs.
# - enough: the run has as many steady epochs as Kalibera and Jones' allocation asks, that is
#   sqrt(cost of a run's start / cost of an epoch x epoch-to-epoch variance / between-run variance).
#   Past it, an epoch buys less precision for the cell than the same time spent on another run. Before a
#   cell has earlier runs, the two variances are taken as equal.

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from wif.run.noise import Between, allocated_epochs, material_drift, median_interval, within_sd

STOP, GO_ON = "stop", "logged"  # the supervisor's answer to an epoch's figures
# The report's tie margin, wif-report --margin: wif.run may not import the report, so change both together.
TIE_MARGIN = 0.02
BETWEEN_SHARE = 0.5  # pinned within half the between-run sd: the run's own error adds <= ~3% to the spread


@dataclass(frozen=True)
class StopRule:
    """The stopping rule's settings, from trainer.* (`wif.run.record.stop_rule`)."""

    warmup: int = 1  # epochs set apart at the start (still measured and logged)
    min_epochs: int = 7  # never stop before this many epochs, warm-up included
    max_epochs: int = 100  # the study's epochs: never run more
    target: Optional[float] = None  # the median interval's relative half-width that pins; None: auto
    confidence: float = 0.95  # of that interval
    memory_window: int = 3  # epochs that must add no new memory peak
    memory_tolerance: float = 0.01  # a new peak counts only above the old one by more than this share
    between: Optional[Between] = None  # auto: the cell's between-run noise from earlier runs (None: none yet)
    margin: float = TIE_MARGIN  # auto: the report's tie margin


@dataclass(frozen=True)
class Decision:
    """The stopping rule's answer after an epoch."""

    stop: bool
    reason: str  # one line, logged as the run's tag wif.stop_reason
    steady_s: Optional[float] = None  # median epoch time over the steady epochs
    half_width: Optional[float] = None  # the median interval's relative half-width (None: too few epochs)
    growing: Tuple[str, ...] = ()  # memory series whose peak still rose within the window
    target: Optional[float] = None  # the half-width that pins (trainer.auto_target, or the derived one)


def still_growing(peaks: Sequence[float], window: int, tolerance: float) -> Optional[float]:
    """The relative rise of the peak in the last `window` epochs over all before; None within `tolerance`."""
    if len(peaks) <= window:
        return float("inf")  # too few epochs to tell: treated as growing
    before, recent = max(peaks[:-window]), max(peaks[-window:])
    rise = (recent - before) / before if before > 0 else (math.inf if recent > before else 0.0)
    return rise if rise > tolerance else None


def auto_target(between: Optional[Between], margin: float = TIE_MARGIN) -> Tuple[float, str]:
    """The half-width that pins a run's figure under auto_target=auto, and why, in words."""
    floor = margin / 2.0
    if between is not None and BETWEEN_SHARE * between.sd > floor:
        return BETWEEN_SHARE * between.sd, f"{BETWEEN_SHARE:g} x {between.describe()}"
    return floor, f"half the report's {100 * margin:g}% tie margin"


@dataclass(frozen=True)
class Steady:
    """The steady epochs' figure, and how well it is pinned against the rule's target."""

    times: Sequence[float]  # the steady epochs' times, the warm-up set apart
    median: Optional[float]
    half: Optional[float]  # the median interval's relative half-width; None: too few epochs
    target: float  # the half-width that pins
    named: str  # the target, in words
    trend: Optional[float]  # auto: a drift that still moves the figure; None: none

    @property
    def pinned(self) -> bool:
        """Whether the interval is within the target."""
        return self.half is not None and self.half < self.target


def steady_figure(epoch_times: Sequence[float], rule: StopRule) -> Steady:
    """The median of the steady epochs, its interval's half-width, and the target it is held to."""
    steady = list(epoch_times[rule.warmup :])
    median = statistics.median(steady) if steady else None
    interval = median_interval(steady, rule.confidence) if steady else None
    half = None if interval is None or not median else (interval[1] - interval[0]) / 2.0 / median
    auto = rule.target is None
    target, why = auto_target(rule.between, rule.margin) if auto else (rule.target, "")
    named = f"the auto target {100 * target:.3g}% ({why})" if auto else f"trainer.auto_target={rule.target:g}"
    trend = material_drift(steady, target) if auto and half is not None else None
    return Steady(times=steady, median=median, half=half, target=target, named=named, trend=trend)


def growing_memory(memory: Dict[str, Sequence[float]], rule: StopRule) -> Dict[str, float]:
    """The memory series whose peak still rose within the rule's window, and by how much."""
    rises = {
        name: still_growing(peaks, rule.memory_window, rule.memory_tolerance) for name, peaks in memory.items() if peaks
    }
    return {name: rise for name, rise in rises.items() if rise is not None}


def needed_epochs(fig: Steady, rule: StopRule, start: float) -> float:
    """The steady epochs Kalibera and Jones' allocation asks under auto; infinite where it does not apply."""
    if rule.target is None and fig.half is not None and fig.trend is None:
        return allocated_epochs(start, within_sd(fig.times), rule.between.sd if rule.between else None)
    return math.inf


MIN_STEADY = 2  # a run its deadline stops keeps its warm-up and at least this many steady epochs


def out_of_time(done: int, warmup: int, epoch_s: float, left_s: float) -> Optional[str]:
    """Why a run stops now: its deadline comes before another epoch and its test; None where it may go on.

    Args:
        done: the epochs it ran, the warm-up included.
        warmup: its warm-up epochs.
        epoch_s: its last epoch, start to start: the training pass, validation and logging.
        left_s: seconds left before its deadline.
    """
    steady = done - warmup
    if steady < MIN_STEADY or left_s >= 2 * epoch_s:  # another epoch, then the test pass and the run's end
        return None
    return (
        f"its deadline under sweep.budget_min: {max(left_s, 0.0):.1f} s left, and an epoch takes {epoch_s:.1f} s; "
        f"{steady} steady epochs measured"
    )


def decide(
    epoch_times: Sequence[float], memory: Dict[str, Sequence[float]], rule: StopRule, start_cost: Optional[float] = None
) -> Decision:
    """Whether a run that has finished `len(epoch_times)` epochs stops now, and why.

    Args:
        epoch_times: every epoch's time so far, the warm-up included.
        memory: per series (ram_peak_rss_mb, vram_peak_device_mb, ...) the peak of each epoch so far.
        rule: the stopping rule.
        start_cost: the run's start in steady epochs, for the allocation under auto; None: its warm-up epochs.
    """
    done = len(epoch_times)
    fig = steady_figure(epoch_times, rule)
    growing = growing_memory(memory, rule)
    start = start_cost if start_cost is not None else float(rule.warmup)
    need = needed_epochs(fig, rule, start)
    if done >= rule.min_epochs and not growing and (fig.pinned or len(fig.times) >= need):
        return Decision(
            stop=True,
            reason=_stop_reason(done, fig, rule, need=need, start=start),
            steady_s=fig.median,
            half_width=fig.half,
            target=fig.target,
        )
    return Decision(
        stop=done >= rule.max_epochs,
        reason=_max_epochs_reason(fig, growing, rule, need=need) if done >= rule.max_epochs else "",
        steady_s=fig.median,
        half_width=fig.half,
        growing=tuple(sorted(growing)),
        target=fig.target,
    )


def _stop_reason(done: int, fig: Steady, rule: StopRule, need: float, start: float) -> str:
    """Why a run stops before max_epochs: its figure is pinned, or it has the epochs the allocation asks.

    Args:
        done: the epochs run.
        fig: the steady figure.
        rule: the stopping rule.
        need: the steady epochs the allocation asks.
        start: the run's start in steady epochs.
    """
    memory_held = f"; no memory peak above +{100 * rule.memory_tolerance:g}% in the last {rule.memory_window} epochs"
    figure = (
        f"median {fig.median:.4g} s +/- {100 * fig.half:.2f}% ({100 * rule.confidence:g}%) "
        f"over {len(fig.times)} steady epochs"
    )
    if fig.pinned:
        return f"pinned after {done} epochs: {figure}, within {fig.named}{memory_held}"
    return (
        f"enough epochs after {done}: {figure}, past Kalibera and Jones' allocation of "
        f"{need:.1f} ({_allocation(start, fig.times, rule)}), so more epochs buy less than another run; "
        f"not within {fig.named}{memory_held}"
    )


def _max_epochs_reason(fig: Steady, growing: Dict[str, float], rule: StopRule, need: float) -> str:
    """Why a run reached max_epochs without stopping earlier.

    Args:
        fig: the steady figure.
        growing: the memory series still growing, and by how much.
        rule: the stopping rule.
        need: the steady epochs the allocation asks.
    """
    why_not: List[str] = []
    if growing:
        why_not.append(
            "memory still growing ("
            + ", ".join(
                f"{name} +{100 * rise:.1f}%" if math.isfinite(rise) else f"{name}: too few epochs to tell"
                for name, rise in sorted(growing.items())
            )
            + f" over the last {rule.memory_window} epochs)"
        )
    if not fig.pinned and len(fig.times) < need:
        why_not.append(
            "median epoch time not pinned ("
            + (f"+/- {100 * fig.half:.2f}%" if fig.half is not None else "too few steady epochs for an interval")
            + f" > {fig.named})"
        )
    if not fig.pinned and fig.trend is not None:
        why_not.append(f"epoch time still drifting ({100 * fig.trend:+.2f}% an epoch, Mann-Kendall 5%)")
    return f"max_epochs={rule.max_epochs} reached: " + "; ".join(why_not or ["min_epochs"])


def _allocation(start: float, steady: Sequence[float], rule: StopRule) -> str:
    """The allocation's inputs, in words, for the stop reason."""
    noise = rule.between.describe() if rule.between else "between runs as much: no earlier runs of this cell"
    return f"a run's start costs {start:.1f} epochs; epochs scatter {100 * within_sd(steady):.1f}%, {noise}"
