"""What holds an epoch back, named: the loader, the copy, interference, the launches or the compute.

    `data`: the step waits for the loader.
    `copy`: the transfer to the device takes the time.
    `interference`: the loader's host work slows the step itself.
    `launch`: the GPU idles between the small kernels the host launches.
    `compute`: the step's own work.

Pure: the runs or the tests give the figures. See NOTE [ The figures and the limit ].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

LAUNCH_BUSY = 0.6  # below this busy share, a step that neither waits nor copies idles between its kernels
LAUNCH_REMEDIES = 'larger batches, torch.compile(mode="reduce-overhead") or CUDA graphs'

# NOTE [ The figures and the limit ]
# Each figure is a mean over the configured run's steady epochs:
# - `data_wait_s`, `copy_s`, `gpu_blocked_s`, `compute_s`: as docs/what-each-run-records.md defines them.
# - `bound_compute_s`: the step's time over as many batches, replayed: the bound's run, `data=fixed` or the
#   script's first batches again. The loader does no work beside that step.
# - `busy`: the GPU's busy share over the epoch, NVML's `gpu_util_pct`. It is the share of its ~1/6 s sample
#   periods in which a kernel ran, read by the run's sampler, nothing in the loop. None off CUDA.
#   `Figures.step_busy` takes it over the step's part of the epoch: the GPU also idles while the host waits.
# - `bound_data_wait_s`: the bound's own wait, a replayed batch's hand-over: the least any loader costs.
# Interference is `compute_s` over `bound_compute_s`, less 1: how much longer the step takes beside the loader.
# The limit is the largest avoidable share of the epoch above the margin: the wait beyond the bound's own, the
# copy or the interference. A step of microseconds waits a share for even a list's next(): no loader setting
# moves that (the H100's 24 tiny layers waited 7% on a TensorDataset's, docs/on-a-gpu.md). Where none is, a
# GPU busy less than LAUNCH_BUSY of the step is launch-bound; else the step computes. A GPU that idles as
# much while another limit holds is launch-bound beyond it. The limit's sentence then says so, with the bound
# that caps what mending the limit gains. The H200's GoogLeNet at 64 px waited for data and idled 70%
# between launches at once: docs/on-a-gpu.md.


@dataclass(frozen=True)
class Figures:
    """The configured run's steady figures that name its limit. See NOTE [ The figures and the limit ]."""

    epoch_s: float
    data_wait_s: float
    copy_s: float
    compute_s: float
    bound_compute_s: float  # NaN: no bound was measured
    gpu_blocked_s: float = 0.0
    bound_data_wait_s: float = 0.0  # the bound's own wait: the least a loader costs an epoch (0: not measured)
    busy: Optional[float] = None  # the GPU's busy share (0..1); None off CUDA
    on_gpu: bool = False
    exposed: bool = False  # the loader is faster than the step, but its wait is not overlapped

    @property
    def step_busy(self) -> Optional[float]:
        """The GPU's busy share within the step, at most 1; None off CUDA (NVML's share is over the epoch)."""
        if not self.on_gpu or self.busy is None:
            return None
        step = self.compute_s + self.copy_s + or_zero(self.gpu_blocked_s)
        return min(self.busy * self.epoch_s / step, 1.0) if step > 0 else self.busy

    @property
    def launch_bound(self) -> bool:
        """Whether the GPU idles between the small kernels the host queues: busy below LAUNCH_BUSY in the step."""
        return self.step_busy is not None and self.step_busy < LAUNCH_BUSY

    @property
    def interference_s(self) -> float:
        """The seconds an epoch's step spends longer beside the loader than replayed (0: none, or not measured)."""
        return self.compute_s - self.bound_compute_s if self.interference > 0 else 0.0

    @property
    def interference(self) -> float:
        """How much longer the step takes beside the loader than with its batches replayed (0: not measured)."""
        if not self.bound_compute_s > 0 or math.isnan(self.compute_s):
            return 0.0
        return max(self.compute_s / self.bound_compute_s - 1.0, 0.0)


@dataclass(frozen=True)
class Limit:
    """What holds the epoch: its kind, its share of the epoch and the sentence that says so."""

    kind: str  # data | copy | interference | launch | compute
    share: float  # the share of the epoch it accounts for (launch: the GPU's idle share within the step)
    said: str
    interference: float = 0.0  # how much longer the step took beside the loader than replayed, whatever the limit
    interference_s: float = 0.0  # the same in seconds an epoch: what removing the loader's host work gains
    busy: Optional[float] = None  # the GPU's busy share within the step (Figures.step_busy; None off CUDA)
    launch_bound: bool = False  # the GPU idles between launches, whatever the limit


def name_limit(f: Figures, margin: float) -> Limit:
    """The limit of the epoch these figures describe, and the sentence that names it and what moves it."""
    shares = {
        "data": max(f.data_wait_s - f.bound_data_wait_s, 0.0) / f.epoch_s,
        "copy": (f.copy_s + or_zero(f.gpu_blocked_s)) / f.epoch_s,
        "interference": f.interference_s / f.epoch_s,
    }
    kind, share = max(shares.items(), key=lambda kv: kv[1])
    said = ""
    if share <= margin:
        kind, share = ("launch", 1.0 - f.step_busy) if f.launch_bound else ("compute", f.compute_s / f.epoch_s)
    elif f.launch_bound:  # mending the limit leaves a step that idles between launches: its gain is capped
        said = "; beyond it, " + _said("launch", 1.0 - f.step_busy, f)
    return Limit(
        kind=kind,
        share=share,
        said=_said(kind, share, f) + said,
        interference=f.interference,
        interference_s=f.interference_s,
        busy=f.step_busy,
        launch_bound=f.launch_bound,
    )


def _said(kind: str, share: float, f: Figures) -> str:
    """The sentence that names the limit `kind` and what moves it."""
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
            f"the launches: the GPU is busy {1.0 - share:.0%} of the step, idle between the small kernels the host "
            f"queues; no loader setting gains more than the bound ({bound} an epoch); what shortens the step is "
            f"outside the loader: {LAUNCH_REMEDIES}"
        )
    return f"the step's own compute ({share:.0%} of the epoch): loader settings cannot shorten it"


def or_zero(x: Optional[float]) -> float:
    """`x`, or 0 where it was not measured (None or NaN)."""
    return 0.0 if x is None or math.isnan(x) else x
