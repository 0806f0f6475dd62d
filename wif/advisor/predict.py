"""The prediction model: each candidate's epoch time from rates measured once (pure; no torch).

The epoch is simulated batch by batch (see NOTE [ Whole batches, round robin ]). On a CPU the workers and
the step share the cores (see NOTE [ The workers beside the step on a CPU ]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import List, Mapping, Optional, Sequence, Tuple

# NOTE [ Whole batches, round robin ]
# A DataLoader hands each batch to one worker, round robin, and a worker fetches its batch WHOLE. With B
# batches and W workers the loader's epoch is about ceil(B/W) batch fetches, not B/W: a worker with the
# epoch's last full batch sets the pace. The case: 4 ms an item, batches of 64, 4 workers and 2
# batches an epoch take one batch's 0.26 s, not half of it. So worker w fetches batches w, w+W, ..., never
# more than `prefetch` batches ahead of the step. The step takes batch k once it is ready and the previous
# step is done. The epoch is the slower of loader and compute, plus what does not overlap: the first batch,
# which fills the pipeline; the copy when it is not hidden, without pin_memory + non_blocking on a GPU; and
# the workers' start-up when they are not persistent.
#
# NOTE [ The workers beside the step on a CPU ]
# The fetches' CPU work is in core-seconds an epoch: the loader's busy cores times its epoch alone. A fetch
# that waits on storage takes no core. That work first goes to the cores the step's threads leave free while
# it computes. The rest takes turns with the step on the cores it fills: the step's compute stretches by that
# work's time on as many cores as there are workers. A step whose threads fill the cores waits for its
# slowest thread at every parallel region, and its idle threads spin. So a worker beside it holds the whole
# step back, while a step that mostly waits leaves the workers every core. On the 2-core CPU of
# docs/advise.md this predicts JPEG decoding's worker settings 11-22% under their measured epochs. A model
# that shared the cores in proportion was 27-50% under; items that compute beside a tiny step are 7-9% over.


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
    """A candidate's epoch as predicted, and its parts."""

    epoch_s: float
    loader_s: float  # the loader's epoch alone (at the contention predicted)
    compute_s: float  # the step's time over the epoch (at the contention predicted)
    startup_s: float
    slowdown: float  # how much the shared cores stretch the CPU work (1: no contention)
    workers: int = 0  # the loader's worker processes

    @property
    def bound(self) -> str:
        """What limits the epoch: the "loader" or the "compute"."""
        return "loader" if self.loader_s > self.compute_s else "compute"


def batch_sizes(items: int, batch_size: int, batches: int | None = None) -> List[int]:
    """An epoch's batches (the last one partial, as DataLoader's drop_last=False), capped at `batches`."""
    sizes = [batch_size] * (items // batch_size) + ([items % batch_size] if items % batch_size else [])
    return sizes if batches is None else sizes[:batches]


def simulate(sizes: Sequence[int], loader: Loader, compute_s: float = 0.0, copy_s: float = 0.0) -> float:
    """One epoch of `loader` feeding a step of `compute_s` a batch: when the step ends its last batch.

    The step's `copy_s` a batch counts unless the loader hides it. See NOTE [ Whole batches, round robin ].
    """
    copy = 0.0 if loader.copy_hidden else copy_s
    if loader.workers == 0:  # the main process fetches, copies and computes in turn
        return sum(sizes) * loader.item_s + len(sizes) * (copy + compute_s)
    workers = loader.workers
    startup = 0.0 if loader.persistent else loader.startup_s
    free = [startup] * workers  # when each worker can start its next batch
    started: List[float] = []  # when the step took each batch
    end = 0.0
    for k, n in enumerate(sizes):
        w = k % workers
        slot = k - workers * loader.prefetch  # a worker may run this many batches ahead of the step
        begin = max(free[w], started[slot] if slot >= 0 else 0.0)
        ready = begin + n * loader.item_s
        free[w] = ready
        take = max(ready, end)
        started.append(take)
        end = take + copy + compute_s
    return end


def predict(sizes: Sequence[int], step: Step, loader: Loader, cores: float) -> Prediction:
    """The epoch time of `loader` feeding `step` over batches of `sizes`, on `cores` host cores."""
    startup = 0.0 if loader.persistent or loader.workers == 0 else loader.startup_s
    alone = simulate(sizes, replace(loader, startup_s=0.0))
    compute_total = step.compute_s * len(sizes)
    slowdown = 1.0
    if step.on_cpu and loader.workers > 0 and compute_total > 0 and loader.cpu_cores > 0:
        # See NOTE [ The workers beside the step on a CPU ]
        work = loader.cpu_cores * alone  # core-seconds of fetching an epoch
        beside = max(cores - step.cores, 0.0) * compute_total  # what the cores the step leaves free can take
        turns = max(work - beside, 0.0) / min(loader.workers, cores)  # the rest: its workers, in turn with the step
        slowdown += turns / compute_total
    compute = step.compute_s * slowdown
    return Prediction(
        epoch_s=simulate(sizes, loader, compute, step.copy_s),
        loader_s=alone,
        compute_s=compute * len(sizes),
        startup_s=startup,
        slowdown=slowdown,
        workers=loader.workers,
    )


def item_time(sizes: Sequence[int], workers: int, epoch_s: float, prefetch: int = 2, startup_s: float = 0.0) -> float:
    """A loader-only epoch's time turned back into seconds per item per worker, by inverting `simulate`.

    Args:
        sizes: the trial's batches.
        workers: its worker processes.
        epoch_s: its epoch's time.
        prefetch: batches in flight per worker.
        startup_s: the workers' start-up, paid in that epoch.
    """
    unit = simulate(sizes, Loader(workers=workers, item_s=1.0, prefetch=prefetch))
    return max(epoch_s - startup_s, 0.0) / unit if unit > 0 else 0.0


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN without a measurement."""
    return (predicted - measured) / measured if measured and measured > 0 else math.nan


def rank(predictions: Sequence[Tuple[str, float]], current_s: float, margin: float) -> List[Tuple[str, float]]:
    """The candidates predicted faster than the current setting by more than `margin`, fastest first."""
    return sorted(((n, s) for n, s in predictions if s * (1 + margin) < current_s), key=lambda p: p[1])


CLOSE = 0.1  # predicted within this of the current setting: a close call; the CPU's predictions err 7-22%


def close_call(predicted_s: Mapping[str, float], current_s: float, close: float = CLOSE) -> Optional[str]:
    """The fastest candidate within `close` of the current setting where none beats the margin; or None."""
    if not predicted_s:
        return None
    name = min(predicted_s, key=lambda n: predicted_s[n])
    return name if predicted_s[name] <= current_s * (1 + close) else None


def cannot_win(items: int, workers: int, in_process_img_s: float, best_epoch_s: float, margin: float) -> bool:
    """Whether `workers` workers cannot beat `best_epoch_s`: even linear scaling of the in-process rate is too slow.

    Args:
        items: the images an epoch takes.
        workers: the count asked about.
        in_process_img_s: the loader's rate at 0 workers.
        best_epoch_s: the best count's predicted epoch.
        margin: the gain a count must promise to be tried.
    """
    if not (workers > 0 and in_process_img_s > 0 and best_epoch_s > 0):
        return False
    return items / (workers * in_process_img_s) > best_epoch_s * (1 + margin)


def distinct(
    ranked: Sequence[Tuple[str, float]], predicted: Mapping[str, Prediction], count: int, margin: float
) -> List[str]:
    """Up to `count` of the ranked candidates to race, fastest first, none the model cannot tell apart.

    A candidate within `margin` of a faster one already in is left out in two cases. Both are limited by the
    step, or both have as many workers. The model's uncertain part, the workers' share of the cores, is the same.
    """
    out: List[str] = []
    for name, epoch in ranked:
        if len(out) == count:
            break
        mine = predicted[name]
        same = any(
            epoch <= predicted[n].epoch_s * (1 + margin)
            and (predicted[n].bound == mine.bound == "compute" or predicted[n].workers == mine.workers)
            for n in out
        )
        if not same:
            out.append(name)
    return out
