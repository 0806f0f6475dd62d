"""One account of an epoch and of a run: an epoch's clock, its logged figures, the warm-up rule, the summary.

The harness (`wif.run.record`), the watch (`wif.watcher`), the in-process API (`wif.tools.api`) and the
advisor, which reads the figures back, all take them from here. So a new figure or a change of the warm-up
rule is made once.

Pure: plain numbers in, plain dicts out; no torch, no MLflow. docs/what-each-run-records.md defines each name.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from wif.config.schema import TrainerConfig
from wif.measure import names

# The epochs left out of every steady figure: workers' start-up, caches filling, the allocator growing.
WARMUP_EPOCHS: int = TrainerConfig.warmup_epochs  # the watch's and the API's; the harness takes trainer.warmup_epochs

# The per-epoch figures the advisor reads back from a run's history (the harness and the watch log them).
EPOCH_KEYS = (
    names.EPOCH_TIME_S,
    names.DATA_WAIT_S,
    names.COPY_S,
    names.GPU_BLOCKED_S,
    names.COMPUTE_S,
    names.GPU_IDLE_S,
    names.FIRST_BATCH_S,
    names.CPU_UTIL_PCT,
    names.GPU_UTIL_PCT,
    names.TREE_CPU_S,
)

# Summary name -> the per-epoch figure it means over the steady epochs; none where an epoch lacks it (GPU's, off CUDA).
MEANS = {
    names.EPOCH_TIME_MEAN_S: names.EPOCH_TIME_S,
    names.THROUGHPUT_MEAN_IMG_S: names.THROUGHPUT_IMG_S,
    names.DATA_WAIT_SHARE_MEAN: "data_wait_share",
    names.FIRST_BATCH_MEAN_S: names.FIRST_BATCH_S,
    names.DATA_WAIT_MEAN_S: names.DATA_WAIT_S,
    names.COMPUTE_MEAN_S: names.COMPUTE_S,
    names.GPU_IDLE_MEAN_S: names.GPU_IDLE_S,
    names.GPU_BLOCKED_MEAN_S: names.GPU_BLOCKED_S,
    names.GPU_UTIL_MEAN_PCT: names.GPU_UTIL_PCT,  # NVML's busy share, sampled: none where a steady epoch got no sample
}


@dataclass
class EpochStats:
    """What one epoch's clock gives (wif.run.loop.TimedFeed): host seconds, bracketed by two synchronizations."""

    epoch_time_s: float
    samples: int
    train_loss: Optional[float]  # None in loader-only mode or in a user's loop: there is no loss to read
    data_wait_s: float  # the loader's part of the host's wait: in next(), plus the transfer's own time
    copy_s: float  # the part of data_wait_s spent in the transfer call (its wait behind the GPU taken out)
    gpu_blocked_s: Optional[float]  # CUDA only: the host blocked in a transfer call behind the GPU's queued work
    copy_bytes_per_epoch: int  # what the transfer moved host-to-device (on a CPU device: would have); 0 if nothing
    compute_s: float  # forward, backward, optimizer step (device time on CUDA)
    first_batch_s: float  # from asking for the epoch's iterator to holding its first batch
    gpu_idle_s: Optional[float]  # CUDA only: gaps between steps on the compute stream
    compute_threads: int  # torch's intra-op threads in the loop's thread: what the model's CPU work used
    t_start: float  # time.monotonic() at the epoch's start and end, for the memory sampler's windows
    t_end: float


def figures(clock: Mapping[str, Any]) -> Dict[str, Optional[float]]:
    """An epoch's logged figures from its clock, EpochStats as a dict: the times, their shares, the throughput.

    None: not measured here, and not logged.
    """
    t = clock[names.EPOCH_TIME_S]
    share = (lambda s: s / t) if t > 0 else (lambda s: 0.0)
    return {
        names.EPOCH_TIME_S: t,
        names.THROUGHPUT_IMG_S: share(clock["samples"]),
        names.DATA_WAIT_S: clock[names.DATA_WAIT_S],
        names.COPY_S: clock[names.COPY_S],
        names.GPU_BLOCKED_S: clock.get(names.GPU_BLOCKED_S),
        names.COMPUTE_S: clock[names.COMPUTE_S],
        "data_wait_share": share(clock[names.DATA_WAIT_S]),
        "compute_share": share(clock[names.COMPUTE_S]),
        names.FIRST_BATCH_S: clock[names.FIRST_BATCH_S],
        names.GPU_IDLE_S: clock.get(names.GPU_IDLE_S),
        names.COMPUTE_THREADS: clock.get(names.COMPUTE_THREADS),
    }


def left_out(epochs_run: int, warmup: int) -> int:
    """The warm-up rule: how many first epochs every steady figure leaves out.

    The first `warmup` epochs are left out where the run has more. A run of no more than `warmup` epochs is
    summarized over all of them; its epochs_run says so.
    """
    return warmup if epochs_run > warmup else 0


def steady(epochs: Sequence[Mapping[str, Any]], warmup: int) -> List[Mapping[str, Any]]:
    """The epochs every steady figure is taken over."""
    return list(epochs[left_out(len(epochs), warmup) :])


def summary(epochs: Sequence[Mapping[str, Any]], warmup: int) -> Dict[str, float]:
    """A run's steady summary from its epochs' figures.

    It holds the median and means over the steady epochs, the warm-up epoch's time set apart, and how many
    epochs ran.
    """
    measured = steady(epochs, warmup)
    out: Dict[str, float] = {
        names.EPOCH_TIME_MEDIAN_S: statistics.median(e[names.EPOCH_TIME_S] for e in measured),
        names.WARMUP_EPOCH_TIME_S: epochs[0][names.EPOCH_TIME_S],
        names.EPOCHS_RUN: len(epochs),
    }
    for name, key in MEANS.items():
        values = [e.get(key) for e in measured]
        if all(v is not None for v in values):
            out[name] = statistics.fmean(values)
    return out
