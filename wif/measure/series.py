"""Timestamped samples cut into the windows a run reports, its epochs, and a data-parallel run's per-rank peaks.

Plain data: no processes, no NVML.
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
        lo, hi = bisect.bisect_left(self.t, t0), bisect.bisect_right(self.t, t1)
        rows = self.rows[lo:hi] or self.rows[max(hi - 1, 0) : hi]
        return [r[column] for r in rows if r[column] is not None]


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
    lo, hi = bisect.bisect_left(series.t, t0), bisect.bisect_right(series.t, t1)
    for row in series.rows[lo:hi] or series.rows[max(hi - 1, 0) : hi]:
        if ranks and all(v is not None for v in row[ranks : 2 * ranks]):
            vram_sum.append(sum(row[ranks : 2 * ranks]))
    if vram_sum:
        out[names.VRAM_PEAK_DEVICE_MB] = max(out[f"rank{r}_vram_peak_device_mb"] for r in range(ranks))
        out["vram_peak_device_sum_mb"] = max(vram_sum)
    return out
