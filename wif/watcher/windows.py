"""Windows of batches: what the watch times and records, an epoch or a part of one.

See NOTE [ Windows ].
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, NamedTuple, Optional

from wif.measure.epochs import EpochStats
from wif.watcher.options import warn

# NOTE [ Windows ]
# A measurement is a run of consecutive windows of batches: the first is its warm-up, the rest are steady.
# An epoch is one kind of window. A script of one long epoch, a step-based loop that leaves after
# `max_steps`, or an endless IterableDataset is measured the same way, in parts of its one epoch.
#   Under wif-advise's orders a window is `batches` batches, the orders' cap. An epoch of at most that many
#     is one window, as it is. A longer one is cut at its last whole window (Orders.cut): an epoch of 94
#     batches in windows of 50 runs 50; one of 10,000 runs window after window until the measurement has what
#     it needs; a stream without a length runs as long. So every window holds as many batches as every
#     other, and their times compare. A window that the loop leaves early, after its epoch's first, is no
#     figure: a break at `max_steps` cuts the last window short.
#   Under the watch alone, a window closes at the epoch's end or at the first batch past WINDOW_S seconds
#     (WIF_WATCH_WINDOW_S): a long epoch, or an endless stream, is said and logged as it goes. Every window
#     with a batch is a figure, its batches counted.
#   A distributed script's ranks gather at every window's end (wif.watcher.ranks), so a window must close at
#     the same batch on every rank: each rank's own clock would close it at another batch, and one rank
#     would wait in the gather while the other waits in the step's all-reduce, for good. So under the watch
#     alone the ranks' windows are cut by count, and rank 0's clock sets the count: the first epoch is one
#     window, and each gather hands every rank rank 0's pace, from which each computes the same count of
#     batches for WINDOW_S (ranks.count_for). A loop that breaks at `max_steps` breaks at the same batch on
#     every rank: its last window ends there on each, and is a figure on each.
# A script that ends before its measurement has its windows is measured again in smaller ones
# (wif.advisor.script.runner).
#
# NOTE [ A window times the script's own run ]
# The race compares windows, so a window under orders times what the script's own epoch would spend on its
# batches. Two things would make it differ:
# - A pause between two windows of one epoch. The script's loop asks for its next batch at once. While the
#   watch paused, the workers filled their queue (4 workers x prefetch 4 = 16 batches), and the next window
#   began with batches the loop never has ready: 5.31x claimed against 4.06x timed (issue 81). So between
#   them run only the clock, a CPU mark and the stopping rule. The MLflow run, its sends and the PSS read wait
#   for the epoch's end or the measurement's (Session._timed, Record.send_held).
# - The epoch's start, paid once per window instead of once per the script's epoch. An epoch cut to fewer
#   batches than the script's own (Orders.cut) starts its loader in every window: workers started every epoch,
#   or a persistent pipeline filling again. The script pays that start once per its own epoch of E batches:
#   epochs of 98 cut to 50 claimed 1.86x against 1.99x timed. So `script_share` spreads the start over E:
#   a window of w batches carries start x w / E of it. The start is its first batch's wait beyond a steady
#   batch's, seen in the epoch's first window (`epoch_start`). The raw window is logged beside it.
# The bound's copies of its kept batches (wif.watcher.replay) are left out too: no loader makes them.
# A stream without a length has no epoch to spread over: a window where it starts carries the start whole,
# the others none, as a stream that runs on pays it once. wif-advise's answer says so.

WINDOW_S = 60.0  # the watch alone: a long epoch is said and logged at least this often
WINDOW_ENV = "WIF_WATCH_WINDOW_S"  # another span for that, in seconds


@dataclass(frozen=True)
class Windows:
    """How an epoch is cut into windows: after `batches` batches or past `seconds`; None: not by that."""

    batches: Optional[int] = None
    seconds: Optional[float] = None
    alone: bool = False  # the watch alone, without orders: every window with a batch is a figure

    def figure(self, first: bool, closed: bool, batches: int) -> bool:
        """Whether a window of `batches` is a figure: its epoch's first, or a later one closed by its count.

        Under the watch alone, any window with a batch is."""
        return first or closed or (self.alone and batches > 0)


class Window:
    """One window of the epoch's `stream`: its batches until its count or clock closes it (`closed`)."""

    def __init__(self, stream: Iterator[Any], windows: Windows) -> None:
        self.stream, self.windows, self.closed = stream, windows, False

    def __iter__(self) -> Iterator[Any]:
        count, seconds = self.windows.batches, self.windows.seconds
        t_end = time.perf_counter() + seconds if seconds else None
        n = 0
        for batch in self.stream:
            yield batch
            n += 1  # the check runs once the step is done, as the next batch is asked for
            if n == count or (t_end is not None and time.perf_counter() >= t_end):
                self.closed = True
                return


def epoch_start(first_batch_s: float, data_wait_s: float, batches: int) -> float:
    """An epoch's start, from its first window: its first batch's wait beyond a steady batch's (0 with one batch)."""
    if batches < 2:
        return 0.0
    steady = (data_wait_s - first_batch_s) / (batches - 1)
    return max(first_batch_s - steady, 0.0)


def script_share(start_s: float, batches: int, epoch_batches: Optional[int], first: bool) -> float:
    """Seconds to take from a window's time so that it carries the script's own share of its epoch's start.

    Negative: the window carries more than it paid. See NOTE [ A window times the script's own run ].

    Args:
        start_s: the epoch's start (`epoch_start`).
        batches: the window's batches.
        epoch_batches: the script's own epoch, uncut; None: a stream without a length.
        first: whether the window is its epoch's first, the one that paid the start.
    """
    if not epoch_batches:
        return 0.0
    paid = start_s if first else 0.0
    return paid - start_s * min(batches / epoch_batches, 1.0)


class Opened(NamedTuple):
    """A window as it opened: its two clocks, the bound's copying so far, and whether it is its epoch's first."""

    t_start: float  # time.monotonic()
    t0: float  # time.perf_counter()
    copied_s: float  # wif.watcher.replay.Copies.s
    first: bool


def as_the_script(stats: EpochStats, left_out_s: float) -> EpochStats:
    """A window's clock less `left_out_s`, from its time and its wait: the loader's part it should not count."""
    wait = max(stats.data_wait_s - left_out_s, 0.0)
    return replace(stats, epoch_time_s=stats.epoch_time_s - left_out_s, data_wait_s=wait)


def watched_alone() -> Windows:
    """The windows of the watch alone: WIF_WATCH_WINDOW_S seconds, WINDOW_S by default; a bad value is said."""
    text = os.environ.get(WINDOW_ENV, str(WINDOW_S))
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        warn(f"{WINDOW_ENV}={text!r} is not seconds above 0: windows of {WINDOW_S:g} s")
        seconds = WINDOW_S
    return Windows(seconds=seconds, alone=True)


def stream(source: Iterable[Any]) -> Iterator[Any]:
    """The epoch's batches as one iterator, begun at the first `next()`: its workers start in the first window."""
    yield from source
