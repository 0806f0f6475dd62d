"""One account of an epoch and of a run: an epoch's clock, its logged figures, the warm-up rule, the summary.

The harness, the watch, the in-process API and the advisor all take them from here, so a change is made once.
The sampler's samples are cut here into the windows a run reports. Pure: plain numbers in, plain dicts out.
docs/what-each-run-records.md defines each name.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field
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
    """An epoch's logged figures from its clock (EpochStats as a dict); None: not measured here, not logged."""
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
    """The warm-up rule: every steady figure leaves out the first `warmup` epochs, where the run has more."""
    return warmup if epochs_run > warmup else 0


def steady(epochs: Sequence[Mapping[str, Any]], warmup: int) -> List[Mapping[str, Any]]:
    """The epochs every steady figure is taken over."""
    return list(epochs[left_out(len(epochs), warmup) :])


def summary(epochs: Sequence[Mapping[str, Any]], warmup: int) -> Dict[str, float]:
    """A run's steady summary from its epochs' figures: median and means, the warm-up epoch's time, epochs run."""
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


@dataclass
class Series:
    """Timestamped rows, appended in time order, cut into windows by bisection."""

    t: List[float] = field(default_factory=list)
    rows: List[tuple] = field(default_factory=list)

    def add(self, t: float, *row: Optional[float]) -> None:
        self.t.append(t)
        self.rows.append(row)

    def between(self, t0: float, t1: float, column: int) -> List[float]:
        """Values sampled in [t0, t1]; if none fell inside, the last value before t1, which held during the window."""
        return [r[column] for r in self.window(t0, t1) if r[column] is not None]

    def window(self, t0: float, t1: float) -> List[tuple]:
        """The rows sampled in [t0, t1]; if none fell inside, the last row sampled before t1."""
        lo, hi = bisect.bisect_left(self.t, t0), bisect.bisect_right(self.t, t1)
        return self.rows[lo:hi] or self.rows[max(hi - 1, 0) : hi]


def rank_peaks(series: Series, ranks: int, t0: float, t1: float) -> Dict[str, float]:
    """A data-parallel run's memory per rank over [t0, t1], and the job's: its largest device peak and its summed peak.

    Args:
        series: rows of each rank's workers, then each rank's device MB.
        ranks: how many ranks.
        t0: the window's start.
        t1: its end.
    """
    out: Dict[str, float] = {}
    vram_sum: List[float] = []
    whole = Series()  # rows sampled before every rank had registered hold fewer ranks' columns: left out
    for t, row in zip(series.t, series.rows):
        if len(row) == 2 * ranks:
            whole.add(t, *row)
    series = whole
    for rank in range(ranks):
        workers = series.between(t0, t1, rank)
        if workers:
            out[f"rank{rank}_workers_peak"] = float(max(workers))
        vram = series.between(t0, t1, ranks + rank)
        if vram:
            out[f"rank{rank}_vram_peak_device_mb"] = float(max(vram))
    for row in series.window(t0, t1):
        if ranks and all(v is not None for v in row[ranks : 2 * ranks]):
            vram_sum.append(sum(row[ranks : 2 * ranks]))
    if vram_sum:
        out[names.VRAM_PEAK_DEVICE_MB] = max(out[f"rank{r}_vram_peak_device_mb"] for r in range(ranks))
        out["vram_peak_device_sum_mb"] = max(vram_sum)
    return out


@dataclass
class Samples:
    """A process tree's samples at three cadences, and each rank's, cut into windows."""

    fast: Series = field(default_factory=Series)  # (rss_mb, gpu_mem_mb)
    mid: Series = field(default_factory=Series)  # (workers, cpu_pct, shm_mb, gpu_util)
    slow: Series = field(default_factory=Series)  # (uss_mb, pss_mb)
    per_rank: Series = field(default_factory=Series)  # (workers of rank 0, 1, ..., vram MB of rank 0, 1, ...)
    ranks: int = 0  # trainer.nproc>1: the ranks registered so far

    def means(self, t0: float, t1: float) -> Dict[str, float]:
        """The tree's mean CPU and GPU utilization over [t0, t1]; a figure with no sample is left out."""
        out: Dict[str, float] = {}
        for key, column in ((names.CPU_UTIL_PCT, 1), (names.GPU_UTIL_PCT, 3)):
            values = self.mid.between(t0, t1, column)
            if values:
                out[key] = sum(values) / len(values)
        return out

    def peaks(self, t0: float, t1: float) -> Dict[str, float]:
        """High-water marks over [t0, t1]; a figure with no sample is left out rather than reported as 0."""
        out: Dict[str, float] = {}
        for key, series, column in (
            (names.RAM_PEAK_RSS_MB, self.fast, 0),
            (names.VRAM_PEAK_DEVICE_MB, self.fast, 1),
            ("workers_peak", self.mid, 0),
            (names.SHM_PEAK_MB, self.mid, 2),
            (names.RAM_PEAK_USS_MB, self.slow, 0),
            (names.RAM_PEAK_PSS_MB, self.slow, 1),
        ):
            values = series.between(t0, t1, column)
            if values:
                out[key] = float(max(values))
        out.update(rank_peaks(self.per_rank, self.ranks, t0, t1))
        return out
