"""What holds an epoch back, named: the loader (data), the copy to the device (copy), the loader's host work
slowing the step itself (interference), the GPU idling between the small kernels the host launches (launch),
or the step's own compute (compute). Pure: the advice's measuring runs give the figures; the tests give them
by hand.

The figures, each a mean over the steady epochs:
- `data_wait_s`, `copy_s`, `gpu_blocked_s`, `compute_s` of the configured run (docs/what-each-run-records.md);
- `bound_compute_s`: the step's time over the same number of batches when they are replayed (the bound's run,
  `data=fixed` or the script's first batches again), so the loader does no work beside it;
- `busy`: the GPU's busy share, NVML's utilization (`gpu_util_pct`: the share of its sample periods in which
  a kernel ran; read by the run's sampler, nothing in the loop; a coarse figure over ~1/6 s periods). None off
  CUDA.

Interference is `compute_s` over `bound_compute_s`, less 1: how much longer the step takes with the loader
running than without. The limit is the largest avoidable share of the epoch above the margin (the wait, the
copy, the interference); where none is, a GPU busy less than LAUNCH_BUSY of the time is launch-bound, and
otherwise the step computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

LAUNCH_BUSY = 0.6  # below this busy share, a step that neither waits nor copies idles between its kernels
LAUNCH_REMEDIES = 'larger batches, torch.compile(mode="reduce-overhead") or CUDA graphs'


@dataclass(frozen=True)
class Figures:
    epoch_s: float
    data_wait_s: float
    copy_s: float
    compute_s: float
    bound_compute_s: float  # NaN: no bound was measured
    gpu_blocked_s: float = 0.0
    busy: Optional[float] = None  # the GPU's busy share (0..1); None off CUDA
    on_gpu: bool = False
    exposed: bool = False  # the loader gives batches faster than the step takes them: its wait is not overlapped

    @property
    def interference(self) -> float:
        """How much longer the step takes beside the loader than with its batches replayed (0: not measured)."""
        if not self.bound_compute_s > 0 or math.isnan(self.compute_s):
            return 0.0
        return max(self.compute_s / self.bound_compute_s - 1.0, 0.0)


@dataclass(frozen=True)
class Limit:
    kind: str  # data | copy | interference | launch | compute
    share: float  # the share of the epoch it accounts for (launch: the GPU's idle share)
    said: str
    interference: float = 0.0  # how much longer the step took beside the loader than replayed, whatever the limit


def name_limit(f: Figures, margin: float) -> Limit:
    """The limit of the epoch these figures describe, and the sentence that names it and what moves it."""
    shares = {
        "data": f.data_wait_s / f.epoch_s,
        "copy": (f.copy_s + _zero(f.gpu_blocked_s)) / f.epoch_s,
        "interference": (f.compute_s - f.bound_compute_s) / f.epoch_s if f.interference > 0 else 0.0,
    }
    kind, share = max(shares.items(), key=lambda kv: kv[1])
    if share <= margin:
        launch = f.on_gpu and f.busy is not None and f.busy < LAUNCH_BUSY
        kind, share = ("launch", 1.0 - f.busy) if launch else ("compute", f.compute_s / f.epoch_s)
    return Limit(kind, share, _said(kind, share, f), f.interference)


def _said(kind: str, share: float, f: Figures) -> str:
    if kind == "data" and f.exposed:  # the wait, not the loader's rate: a loader overlapped with the step keeps up
        return (
            f"the wait for data, exposed: the step waits {share:.0%} of the epoch for batches that a loader "
            "overlapped with the step would have ready"
        )
    if kind == "data":
        return f"the loader: the step waits {share:.0%} of the epoch for its batches"
    if kind == "copy":
        return (
            f"the copy to the device: {share:.0%} of the epoch in the transfer; pinned memory with non_blocking "
            "copies hide it behind the step, uint8 transfers shrink it"
        )
    if kind == "interference":
        said = (
            f"the loader's host work slows the step itself: it takes {f.interference:.0%} longer beside the loader "
            f"than with its batches replayed ({share:.0%} of the epoch); "
        )
        if f.on_gpu:
            return said + (
                "workers, a preloaded or GPU-resident dataset, or uint8 transfers move that work off the thread "
                "that launches the step's kernels"
            )
        return said + (
            "on a CPU the loader and the step share the cores: a loader that does less per item (a preloaded "
            "dataset, fewer workers) leaves them to the step"
        )
    if kind == "launch":
        bound = f"{f.bound_compute_s:.3f} s" if f.bound_compute_s > 0 else "the step's own time"
        return (
            f"the launches: the GPU is busy {1.0 - share:.0%} of the time, idle between the small kernels the host "
            f"queues; no loader setting gains more than the bound ({bound} an epoch); what shortens the step is "
            f"outside the loader: {LAUNCH_REMEDIES}"
        )
    return f"the step's own compute ({share:.0%} of the epoch): loader settings cannot shorten it"


def _zero(x: float) -> float:
    return 0.0 if x is None or math.isnan(x) else x
