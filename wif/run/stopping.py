"""trainer.epochs=auto: when a run's compared figure is pinned down, so that more epochs would tell nothing new.

A pure rule, asked at epoch boundaries only (the run waits for its ack between epochs anyway, so asking
costs the timed epochs nothing). The warm-up epochs are set apart; over the steady epochs after them the
run's figure is their median epoch time (the report's `epoch_time_median_s`), pinned once the
distribution-free interval of that median (order statistics, binomial ranks: no assumption about how epoch
times scatter) is narrower than `auto_target` of it, on each side. Memory must have stopped growing too:
copy-on-read RAM growth in DataLoader workers (PyTorch #13246) is a finding, not noise, so a run whose RAM
or VRAM peak still rises runs on to `max_epochs` and says so. Kalibera and Jones (2013): spend repetitions
on the level whose variance dominates (runs), not on more iterations of a settled one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

STOP, GO_ON = "stop", "logged"  # the supervisor's answer to an epoch's figures


@dataclass(frozen=True)
class StopRule:
    warmup: int = 1  # epochs set apart at the start (still measured and logged)
    min_epochs: int = 7  # never stop before this many epochs, warm-up included
    max_epochs: int = 100  # the study's epochs: never run more
    target: float = 0.01  # relative half-width of the median's interval at which the figure is pinned
    confidence: float = 0.95  # of that interval
    memory_window: int = 3  # epochs that must add no new memory peak
    memory_tolerance: float = 0.01  # a new peak counts only above the old one by more than this share


@dataclass(frozen=True)
class Decision:
    stop: bool
    reason: str  # one line, logged as the run's tag wif.stop_reason
    steady_s: Optional[float] = None  # median epoch time over the steady epochs
    half_width: Optional[float] = None  # the median interval's relative half-width (None: too few epochs)
    growing: Tuple[str, ...] = ()  # memory series whose peak still rose within the window


def median_interval(values: Sequence[float], confidence: float) -> Optional[Tuple[float, float]]:
    """The distribution-free interval of the median: (x_(k), x_(n+1-k)) with the largest k whose coverage,
    1 - 2 P(Binomial(n, 1/2) < k), is at least `confidence`; None when n is too small for any k (n < 6 at 95%)."""
    n, xs = len(values), sorted(values)
    alpha_half, tail, k = (1.0 - confidence) / 2.0, 0.0, 0
    for j in range(n // 2):  # tail = P(B < j + 1); x_(j+1) may bound the interval while it stays within alpha/2
        tail += math.comb(n, j) / 2.0 ** n
        if tail > alpha_half:
            break
        k = j + 1
    if k == 0:
        return None
    return xs[k - 1], xs[n - k]


def min_steady_epochs(confidence: float) -> int:
    """The fewest steady epochs whose median has an interval at `confidence`."""
    n = 1
    while median_interval([0.0] * n, confidence) is None:
        n += 1
    return n


def still_growing(peaks: Sequence[float], window: int, tolerance: float) -> Optional[float]:
    """The relative rise of the peak within the last `window` epochs over every peak before them, when it
    exceeds `tolerance`; None when the peak has held (or there is no earlier epoch to compare with yet)."""
    if len(peaks) <= window:
        return float("inf")  # too few epochs to tell: treated as growing
    before, recent = max(peaks[:-window]), max(peaks[-window:])
    rise = (recent - before) / before if before > 0 else (math.inf if recent > before else 0.0)
    return rise if rise > tolerance else None


def decide(epoch_times: Sequence[float], memory: Dict[str, Sequence[float]], rule: StopRule) -> Decision:
    """Whether a run that has finished `len(epoch_times)` epochs stops now, and why.

    `memory`: per series (ram_peak_rss_mb, vram_peak_device_mb, ...) the peak of each epoch so far.
    """
    done = len(epoch_times)
    steady = list(epoch_times[rule.warmup:])
    median = statistics.median(steady) if steady else None
    interval = median_interval(steady, rule.confidence) if steady else None
    half = None if interval is None or not median else (interval[1] - interval[0]) / 2.0 / median
    growing = {name: still_growing(peaks, rule.memory_window, rule.memory_tolerance)
               for name, peaks in memory.items() if peaks}
    growing = {name: rise for name, rise in growing.items() if rise is not None}
    pinned = half is not None and half < rule.target
    if done >= rule.min_epochs and pinned and not growing:
        return Decision(True, f"pinned after {done} epochs: median {median:.4g} s +/- {100 * half:.2f}% "
                        f"({100 * rule.confidence:g}%) over {len(steady)} steady epochs, below "
                        f"trainer.auto_target={rule.target:g}; no memory peak above +{100 * rule.memory_tolerance:g}% "
                        f"in the last {rule.memory_window} epochs", median, half)
    if done < rule.max_epochs:
        return Decision(False, "", median, half, tuple(sorted(growing)))
    why = []
    if growing:
        why.append("memory still growing (" + ", ".join(
            f"{name} +{100 * rise:.1f}%" if math.isfinite(rise) else f"{name}: too few epochs to tell"
            for name, rise in sorted(growing.items())) + f" over the last {rule.memory_window} epochs)")
    if not pinned:
        why.append("median epoch time not pinned (" + (f"+/- {100 * half:.2f}%" if half is not None else
                   "too few steady epochs for an interval") + f" > trainer.auto_target={rule.target:g})")
    return Decision(True, f"max_epochs={rule.max_epochs} reached: " + "; ".join(why or ["min_epochs"]), median, half,
                    tuple(sorted(growing)))
