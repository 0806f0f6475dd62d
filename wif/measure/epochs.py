"""One account of an epoch and of a run: what an epoch's clock gives, the figures logged from it, the warm-up
rule and the run's steady summary. The harness (`wif.run.record`), the watch (`wif.watcher`), the in-process
API (`wif.tools.api`) and the advisor (which reads the figures back) all take them from here, so a new figure
or a change of the warm-up rule is made once.

Pure: plain numbers in, plain dicts out; no torch, no MLflow. docs/what-each-run-records.md defines each name.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from wif.config.schema import TrainerConfig

# The epochs left out of every steady figure: workers' start-up, caches filling, the allocator growing. The
# harness takes trainer.warmup_epochs; the watch and the API take this, the schema's default.
WARMUP_EPOCHS: int = TrainerConfig.warmup_epochs

# The per-epoch figures the advisor reads back from a run's history (the harness and the watch log them).
EPOCH_KEYS = (
    "epoch_time_s",
    "data_wait_s",
    "copy_s",
    "gpu_blocked_s",
    "compute_s",
    "gpu_idle_s",
    "first_batch_s",
    "cpu_util_pct",
    "gpu_util_pct",
    "tree_cpu_s",
)

# The summary's means over the steady epochs: summary name -> per-epoch figure. A figure an epoch lacks
# (gpu_idle_s, gpu_blocked_s and gpu_util_pct off CUDA) has no mean.
MEANS = {
    "epoch_time_mean_s": "epoch_time_s",
    "throughput_mean_img_s": "throughput_img_s",
    "data_wait_share_mean": "data_wait_share",
    "first_batch_mean_s": "first_batch_s",
    "data_wait_mean_s": "data_wait_s",
    "compute_mean_s": "compute_s",
    "gpu_idle_mean_s": "gpu_idle_s",
    "gpu_blocked_mean_s": "gpu_blocked_s",
    "gpu_util_mean_pct": "gpu_util_pct",  # NVML's busy share, sampled: absent where a steady epoch got no sample
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
    """An epoch's logged figures from its clock's (EpochStats as a dict): the times, their shares of the
    epoch and the throughput. None: not measured here (not logged)."""
    t = clock["epoch_time_s"]
    share = (lambda s: s / t) if t > 0 else (lambda s: 0.0)
    return {
        "epoch_time_s": t,
        "throughput_img_s": share(clock["samples"]),
        "data_wait_s": clock["data_wait_s"],
        "copy_s": clock["copy_s"],
        "gpu_blocked_s": clock.get("gpu_blocked_s"),
        "compute_s": clock["compute_s"],
        "data_wait_share": share(clock["data_wait_s"]),
        "compute_share": share(clock["compute_s"]),
        "first_batch_s": clock["first_batch_s"],
        "gpu_idle_s": clock.get("gpu_idle_s"),
        "compute_threads": clock.get("compute_threads"),
    }


def left_out(epochs_run: int, warmup: int) -> int:
    """The warm-up rule: the first `warmup` epochs are left out where the run has more; a run of no more
    than `warmup` epochs is summarized over all of them (its epochs_run says so)."""
    return warmup if epochs_run > warmup else 0


def steady(epochs: Sequence[Mapping[str, Any]], warmup: int) -> List[Mapping[str, Any]]:
    """The epochs every steady figure is taken over."""
    return list(epochs[left_out(len(epochs), warmup) :])


def summary(epochs: Sequence[Mapping[str, Any]], warmup: int) -> Dict[str, float]:
    """A run's steady summary from its epochs' figures: the median and means over the steady epochs, the
    warm-up epoch's time set apart, and how many epochs ran."""
    measured = steady(epochs, warmup)
    out: Dict[str, float] = {
        "epoch_time_median_s": statistics.median(e["epoch_time_s"] for e in measured),
        "warmup_epoch_time_s": epochs[0]["epoch_time_s"],
        "epochs_run": len(epochs),
    }
    for name, key in MEANS.items():
        values = [e.get(key) for e in measured]
        if all(v is not None for v in values):
            out[name] = statistics.fmean(values)
    return out
