"""A run's samples, cut into the windows it reports: its epochs' peaks and means, and each rank's peaks.

This module holds plain data: no processes, no NVML. `wif.measure.sampler` takes the samples.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from wif.measure import names


@dataclass
class Series:
    """Timestamped rows, appended in time order, cut into windows by bisection."""

    t: List[float] = field(default_factory=list)
    rows: List[tuple] = field(default_factory=list)

    def add(self, t: float, *row: Optional[float]) -> None:
        self.t.append(t)
        self.rows.append(row)

    def between(self, t0: float, t1: float, column: int) -> List[float]:
        """Values sampled in [t0, t1]; if none fell inside, the last value sampled before t1.

        A window shorter than the cadence holds no sample; the value before it held during the window.
        """
        return [r[column] for r in self.window(t0, t1) if r[column] is not None]

    def window(self, t0: float, t1: float) -> List[tuple]:
        """The rows sampled in [t0, t1]; if none fell inside, the last row sampled before t1."""
        lo, hi = bisect.bisect_left(self.t, t0), bisect.bisect_right(self.t, t1)
        return self.rows[lo:hi] or self.rows[max(hi - 1, 0) : hi]


def rank_peaks(series: Series, ranks: int, t0: float, t1: float) -> Dict[str, float]:
    """A data-parallel run's memory per rank over [t0, t1], and the job's.

    Each rank gets its worker and device-memory peaks. The job gets the largest rank's device peak, the GPU
    size it needs, and the peak of their sum.

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
