"""What a run of a sweep costs: its start, a fixed part and its epochs, learned as the sweep runs.

A job's price is `overhead_s + fixed_s + epochs * epoch_s`. The *expected* price plans what fits; the *upper*
one is the most epochs it may plausibly take, times SAFETY. Earlier runs price the jobs, else a probe, else
the first jobs (NOTE [ Block 0 prices the rest ]). Each job run replaces its cell's guess, and cells not run
yet are scaled by how far the measured ones were from their guesses.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wif.config import Config
from wif.measure.names import Cell
from wif.run.stopping import MIN_STEADY

SAFETY = 1.2  # a job starts only if 1.2x its upper price fits in what is left
END_RESERVE_S = 5.0  # the sweep's own end (the last look, the record, the exit) after its last job
RATIO_BOUNDS = (0.5, 2.0)  # how far measured jobs may scale the guesses of cells not run yet (one slow job is noise)
AUTO_SEEN = 3  # auto runs seen before their epochs bound the next one's, instead of trainer.max_epochs
AUTO_HEADROOM = 1.5  # ... at 1.5x the most epochs any of them took (capped at trainer.max_epochs)


@dataclass(frozen=True)
class CellCost:
    """What one run of a cell costs: its job's start, a fixed part of the run, and each epoch."""

    overhead_s: float
    fixed_s: float
    epoch_s: float

    def seconds(self, epochs: float) -> float:
        """The run's price at `epochs` epochs."""
        return self.overhead_s + self.fixed_s + epochs * self.epoch_s

    def scaled(self, ratio: float) -> "CellCost":
        """Every part times `ratio`."""
        return CellCost(overhead_s=self.overhead_s * ratio, fixed_s=self.fixed_s * ratio, epoch_s=self.epoch_s * ratio)


@dataclass(frozen=True)
class Epochs:
    """The epochs a run is expected to take, the most it may take, and why."""

    expected: float
    upper: float
    why: str = ""


def auto_epochs(taken: Sequence[int], min_epochs: int, max_epochs: int) -> Epochs:
    """The epochs a `trainer.epochs=auto` run will take, from those earlier auto runs of the testbed took."""
    if not taken:
        return Epochs(min_epochs, max_epochs, f"auto: {min_epochs} expected (none seen), up to max_epochs={max_epochs}")
    expected = float(statistics.median(taken))
    if len(taken) < AUTO_SEEN:
        return Epochs(expected, max_epochs, f"auto: {expected:g} expected ({len(taken)} seen), up to max_epochs")
    upper = min(max_epochs, math.ceil(AUTO_HEADROOM * max(taken)))
    return Epochs(expected, upper, f"auto: {expected:g} expected, up to {upper} ({len(taken)} seen, most {max(taken)})")


@dataclass(frozen=True)
class Job:
    """One job as the budget sees it."""

    key: Tuple[str, ...]  # its overrides
    cell: str  # "setting@fraction" (wif.measure.names.Cell)
    fraction: float
    block: int
    batches: int  # training batches in a full epoch
    epochs: Optional[int] = None  # trainer.epochs; None: auto (Prices.auto)
    done: bool = False  # a FINISHED run of this configuration exists: skipped, costs nothing
    in_flight: int = 0  # batches its loader holds ahead of the step (wif.data.engines.common.in_flight)

    @property
    def setting(self) -> str:
        return Cell.parse(self.cell).setting


@dataclass
class Prices:
    """Each cell's price: measured here, else from earlier runs or its setting's probe, else the median cell."""

    history: Dict[str, CellCost] = field(default_factory=dict)
    probes: Dict[str, Any] = field(default_factory=dict)  # setting -> its wif.sweep.probe.ProbeCost
    auto: Epochs = Epochs(7, 100)  # what a trainer.epochs=auto run takes
    measured: Dict[str, List[CellCost]] = field(default_factory=dict)
    ratios: List[float] = field(default_factory=list)
    warmup: int = 1  # trainer.warmup_epochs: an auto run's smallest useful run starts with them
    batches: Dict[str, int] = field(default_factory=dict)  # a measured cell's training batches an epoch
    starts: List[float] = field(default_factory=list)  # each job's start here, wall less run, in order

    @property
    def priced(self) -> bool:
        """Whether any job has a price: earlier runs, a probe, or a job of this sweep."""
        return bool(self.history or self.probes or self.measured)

    def guess(self, job: Job) -> Optional[CellCost]:
        """The price before any job of the cell ran here; a probe's start is the median of all probes' starts."""
        if job.cell in self.history:
            return self.history[job.cell]
        if job.setting in self.probes:
            start = statistics.median(max(p.wall_s - p.run_s, 0.0) for p in self.probes.values())
            cost = self.probes[job.setting].cost(job.batches, job.fraction)
            return CellCost(overhead_s=start, fixed_s=cost.fixed_s, epoch_s=cost.epoch_s)
        # else the median of the earlier runs' cells, or of the job as each probed setting would run it
        known = list(self.history.values()) or [
            self.guess(replace(job, cell=str(Cell.of(s, job.fraction)))) for s in self.probes
        ]
        if not known:
            known = [self._alike(job, cell) for cell in self.measured]  # See NOTE [ Block 0 prices the rest ]
        if not known:
            return None
        keys = ("overhead_s", "fixed_s", "epoch_s")
        return CellCost(*(statistics.median(getattr(c, k) for c in known) for k in keys))

    def _alike(self, job: Job, cell: str) -> CellCost:
        """A cell measured here, its epoch scaled to the job's training batches."""
        seen = self.measured[cell]
        epoch_s = statistics.median(c.epoch_s for c in seen) * job.batches / max(self.batches.get(cell, 1), 1)
        return CellCost(overhead_s=self.start_here(), fixed_s=0.0, epoch_s=epoch_s)

    def start_here(self) -> float:
        """A job's start in this sweep: the median, less the first job's one-time costs once others ran."""
        return statistics.median(self.starts[1:] or self.starts)

    def cost(self, job: Job) -> Optional[CellCost]:
        """The price: the median of what the cell's jobs took here, else the guess, scaled."""
        if job.cell in self.measured:
            epoch_s = statistics.median(c.epoch_s for c in self.measured[job.cell])
            return CellCost(overhead_s=self.start_here(), fixed_s=0.0, epoch_s=epoch_s)
        guess = self.guess(job)
        ratio = min(max(statistics.median(self.ratios), RATIO_BOUNDS[0]), RATIO_BOUNDS[1]) if self.ratios else 1.0
        return guess.scaled(ratio) if guess else guess

    def expected_s(self, job: Job) -> float:
        """What the job is expected to cost; nothing once done."""
        cost = self.cost(job)
        return 0.0 if job.done or cost is None else cost.seconds(job.epochs or self.auto.expected)

    def upper_s(self, job: Job) -> float:
        """The most the job may cost, times SAFETY; nothing once done."""
        cost = self.cost(job)
        return 0.0 if job.done or cost is None else SAFETY * cost.seconds(job.epochs or self.auto.upper)

    def start_s(self, job: Job) -> float:
        """What must fit before the job starts, times SAFETY: an auto run's smallest useful run, or its upper price."""
        cost = self.cost(job)
        if job.epochs is not None or job.done or cost is None:
            return self.upper_s(job)
        return SAFETY * cost.seconds(min(self.warmup + MIN_STEADY, self.auto.upper))

    def allowed_s(self, job: Job, left_s: float, undone: int = 1) -> float:
        """The seconds a started job may take: its upper price, at most its equal share of `left_s` among `undone`.

        It gets at least its smallest useful run: more short runs tell a race more than fewer long ones.
        """
        share = max((left_s - END_RESERVE_S) / max(undone, 1), self.start_s(job))
        if self.cost(job) is None:  # no price yet: its share, and its deadline keeps its smallest run
            return share
        return min(self.upper_s(job), left_s - END_RESERVE_S, share)

    def measure(self, job: Job, wall_s: float, run_s: float, epochs: int) -> None:
        """Learn from what a job of this sweep took: the cell's price from now on, and the others' correction.

        Args:
            job: the job.
            wall_s: its job, launch to return.
            run_s: its run's time_total_s.
            epochs: the epochs it ran.
        """
        guess = self.guess(job) if self.history or self.probes else None  # guesses from this sweep's jobs: no ratio
        if guess is not None and job.cell not in self.measured:
            self.ratios.append(wall_s / max(guess.seconds(epochs), 1e-6))
        took = CellCost(overhead_s=max(wall_s - run_s, 0.0), fixed_s=0.0, epoch_s=run_s / max(epochs, 1))
        self.measured.setdefault(job.cell, []).append(took)
        self.batches[job.cell] = job.batches
        self.starts.append(took.overhead_s)


# NOTE [ Block 0 prices the rest ]
# On a store with no earlier run of the testbed, a sweep of auto jobs runs no probe. A probe cost a 3-minute
# CPU sweep 53 s of 180 for 2 epochs of a few batches each, figures no run kept. An auto job has a deadline
# and keeps only its smallest useful run past it (wif.run.stopping.out_of_time), so it may start unpriced.
# The first job of the smallest fraction prices the next, each cell measured prices itself, and a cell not
# run yet costs the median measured cell, its epoch scaled by its training batches.


def batches_per_epoch(
    num_train: int, fraction: float, val_split: float, batch_size: int, max_batches: Optional[int]
) -> int:
    """Training batches in a full epoch, as wif.data.datasets splits the subset: validation cut first.

    Args:
        num_train: images in the full training set.
        fraction: the share of them the run uses.
        val_split: the share of the subset kept for validation.
        batch_size: images a batch.
        max_batches: trainer.max_batches, a cap; None for none.
    """
    subset = round(num_train * fraction)
    full = max(math.ceil((subset - round(subset * val_split)) / batch_size), 1)
    return min(full, max_batches) if max_batches else full


def epoch_batches(conf: Config) -> int:
    """Training batches in a full epoch of a composed job."""
    d = conf.data
    return batches_per_epoch(
        num_train=d.num_train,
        fraction=d.fraction,
        val_split=d.val_split,
        batch_size=d.batch_size,
        max_batches=conf.trainer.max_batches,
    )
