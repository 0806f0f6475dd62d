"""The prediction model: each candidate's epoch time from rates measured once (pure; no torch).

A DataLoader hands each batch to one worker, round robin, and a worker fetches its batch WHOLE: with B
batches and W workers the loader's epoch is about ceil(B/W) batch fetches, not B/W (a worker with the
epoch's last full batch sets the pace; the issue's case: 4 ms an item, 64 an item batch, 4 workers and
2 batches an epoch take one batch's 0.26 s, not half of it). So the epoch is simulated batch by batch:
worker w fetches batches w, w+W, ... (never more than `prefetch` batches ahead of the step), the step
takes batch k once it is ready and the previous step is done. What comes out is the slower of loader and
compute, plus what does not overlap: the first batch (the pipeline's fill), the copy when it is not
hidden (no pin_memory + non_blocking on a GPU), and the workers' start-up when they are not persistent.

On a CPU the workers and the step share the cores: when the loader's busy cores plus the step's exceed
the cores there are, both stretch by the excess (the CPU share of a fetch only: a fetch that waits on
storage takes no core). The loader's busy share depends on the epoch it stretches, so the two are solved
together by a few fixed-point rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

ROUNDS = 8  # fixed-point rounds for the loader's busy share (converges in 3-4 on every case tried)


@dataclass(frozen=True)
class Step:
    """What the model's step costs, measured at the bound (the same batch every step, no loading)."""

    compute_s: float  # the step's time per batch
    copy_s: float = 0.0  # the host's time per batch in the copy to the device (0 on a CPU)
    cores: float = 1.0  # cores the step keeps busy while it runs (on a CPU: its threads; on a GPU: ~1)
    on_cpu: bool = True  # the step computes on the host's cores (so workers compete with it)


@dataclass(frozen=True)
class Loader:
    """One loader setting and its rates, measured alone (loader only)."""

    workers: int
    item_s: float  # seconds one worker (or the main process) takes per item, measured alone
    cpu_cores: float = 0.0  # cores the loader keeps busy when fetching at full speed (0: waits on storage)
    prefetch: int = 2  # batches in flight per worker
    persistent: bool = True  # workers kept between epochs: no start-up each epoch
    startup_s: float = 0.0  # starting the workers, paid every epoch when not persistent
    copy_hidden: bool = False  # pin_memory + non_blocking on a GPU: the copy overlaps the step


@dataclass(frozen=True)
class Prediction:
    epoch_s: float
    loader_s: float  # the loader's epoch alone (at the contention predicted)
    compute_s: float  # the step's time over the epoch (at the contention predicted)
    startup_s: float
    slowdown: float  # how much the shared cores stretch the CPU work (1: no contention)

    @property
    def bound(self) -> str:
        return "loader" if self.loader_s > self.compute_s else "compute"


def batch_sizes(items: int, batch_size: int, batches: int | None = None) -> List[int]:
    """An epoch's batches (the last one partial, as DataLoader's drop_last=False), capped at `batches`."""
    sizes = [batch_size] * (items // batch_size) + ([items % batch_size] if items % batch_size else [])
    return sizes if batches is None else sizes[:batches]


def simulate(sizes: Sequence[int], workers: int, item_s: float, compute_s: float, copy_s: float = 0.0,
             prefetch: int = 2, startup_s: float = 0.0, copy_hidden: bool = False) -> float:
    """One epoch, batch by batch: when the step ends its last batch."""
    copy = 0.0 if copy_hidden else copy_s
    if workers == 0:  # the main process fetches, copies and computes in turn
        return sum(sizes) * item_s + len(sizes) * (copy + compute_s)
    free = [startup_s] * workers  # when each worker can start its next batch
    started: List[float] = []  # when the step took each batch
    end = 0.0
    for k, n in enumerate(sizes):
        w = k % workers
        slot = k - workers * prefetch  # a worker may run this many batches ahead of the step
        begin = max(free[w], started[slot] if slot >= 0 else 0.0)
        ready = begin + n * item_s
        free[w] = ready
        take = max(ready, end)
        started.append(take)
        end = take + copy + compute_s
    return end


def predict(sizes: Sequence[int], step: Step, loader: Loader, cores: float) -> Prediction:
    """The epoch time of `loader` feeding `step` over batches of `sizes`, on `cores` host cores."""
    startup = 0.0 if loader.persistent or loader.workers == 0 else loader.startup_s
    alone = simulate(sizes, loader.workers, loader.item_s, 0.0, prefetch=loader.prefetch)
    per_worker = min(loader.cpu_cores / max(loader.workers, 1), 1.0)  # a fetch's CPU share
    slowdown, epoch, compute_total, loader_s = 1.0, 0.0, 0.0, alone
    for _ in range(ROUNDS if step.on_cpu and loader.workers > 0 else 1):
        item = loader.item_s * (1.0 - per_worker + per_worker * slowdown)
        compute = step.compute_s * slowdown if step.on_cpu else step.compute_s
        epoch = simulate(sizes, loader.workers, item, compute, step.copy_s, loader.prefetch, startup,
                         loader.copy_hidden)
        compute_total = compute * len(sizes)
        loader_s = alone * item / loader.item_s if loader.item_s > 0 else 0.0
        busy = min(loader_s / epoch, 1.0) if epoch > 0 else 0.0
        step_busy = min(compute_total / epoch, 1.0) if epoch > 0 else 0.0
        demand = loader.cpu_cores * busy + step.cores * step_busy
        slowdown = max(1.0, demand / cores) if cores > 0 else 1.0
    return Prediction(epoch, loader_s, compute_total, startup, slowdown)


def item_time(sizes: Sequence[int], workers: int, epoch_s: float, prefetch: int = 2, startup_s: float = 0.0,
              copy_s: float = 0.0) -> float:
    """A loader-only epoch's time turned back into seconds per item per worker: the inverse of `simulate`
    with no compute (linear in item_s), so a trial of a few batches prices an epoch of many."""
    unit = simulate(sizes, workers, 1.0, 0.0, prefetch=prefetch)
    spent = epoch_s - startup_s - len(sizes) * copy_s
    return max(spent, 0.0) / unit if unit > 0 else 0.0


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN without a measurement."""
    return (predicted - measured) / measured if measured and measured > 0 else math.nan


def rank(predictions: Sequence[Tuple[str, float]], current_s: float, margin: float) -> List[Tuple[str, float]]:
    """The candidates predicted faster than the current setting by more than `margin`, fastest first."""
    return sorted(((n, s) for n, s in predictions if s * (1 + margin) < current_s), key=lambda p: p[1])
