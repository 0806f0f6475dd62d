"""wif from the user's own training script (docs/your-workload.md).

People paste a worker search into `main_worker` of PyTorch's ImageNet example; these two do it for them.
`tune_workers` runs the wif-tune search in this process; `time_epochs` puts wif's epoch clock around your own
step. Both run in the caller's process on any Dataset and loop: no Hydra, no forked child, no memory sampler.
A train.py run records those. `time_epochs` can log its figures to MLflow, tagged `wif.kind=user`, so the
study's report never mixes them with its own runs.

For example:

    import wif
    pick = wif.tune_workers(train_set, batch_size=256)
    loader = DataLoader(train_set, batch_size=256, num_workers=pick.num_workers, pin_memory=pick.pin_memory)
    times = wif.time_epochs(loader, my_step, epochs=3)
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from wif.measure import epochs as epoch_account
from wif.measure import names
from wif.measure.sysinfo import usable_cores
from wif.measure.timing import StepClock, synchronize
from wif.run.loop import TimedFeed, map_tensors, samples_in
from wif.run.training import CappedBatches
from wif.tools.tune import table
from wif.tools.tune_trials import Trial
from wif.tools.worker_search import best_trial, search_workers

# No sampler beside the trials: a sampler thread would share the GIL with the loop it times.
NO_RAM = "wif.tune_workers runs its trials in your process, without wif-tune's memory sampler; wif-tune measures it"


def _default_device(device: Optional[torch.device | str]) -> torch.device:
    """`device`, or the current CUDA device where there is one, else the CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


@dataclass
class WorkerPick:
    """The pick and every trial: the fewest workers within `min_gain` of the fastest, then no pinning."""

    num_workers: int
    pin_memory: bool
    img_s: float
    trials: List[Trial]
    table: str

    def __str__(self) -> str:
        return (
            f"{self.table}\nBest: num_workers={self.num_workers} with pin_memory={str(self.pin_memory).lower()} "
            f"({self.img_s:.0f} img/s)"
        )


@dataclass(frozen=True)
class TuneOptions:
    """How `tune_workers` searches: its keyword arguments beyond the loader's.

    Args:
        max_workers: the most workers tried; None for twice the usable cores.
        batches: batches timed an epoch.
        epochs: epochs a trial, the first left out; at least 2 run.
        step: the coarse pass's step in workers.
        radius: the refining pass's reach around the best.
        min_gain: the share faster that more workers must be to count as helping.
        device: where the batches are copied; None for the current CUDA device, else the CPU.
        verbose: print each trial's line.
    """

    max_workers: Optional[int] = None
    batches: int = 50
    epochs: int = 3
    step: int = 4
    radius: int = 3
    min_gain: float = 0.05
    device: Optional[torch.device | str] = None
    verbose: bool = True


def tune_workers(
    dataset: Dataset,
    batch_size: int = 64,
    pin_memory: Sequence[bool] = (False, True),
    collate_fn: Optional[Callable[[List[Any]], Any]] = None,
    **options: Any,
) -> WorkerPick:
    """The search `wif-tune` runs (`wif.tools.worker_search.search_workers`), on the caller's Dataset.

    It searches num_workers for each pin_memory. Each trial iterates `batches` batches for `epochs` epochs, the
    first left out, and copies them to the device. Without CUDA only pin_memory=False is tried: pinning has no
    effect there.

    Args:
        dataset: the Dataset the trials' DataLoaders read.
        batch_size: the trials' batch size.
        pin_memory: the pinnings searched.
        collate_fn: the trials' collate_fn; None for DataLoader's default.
        **options: the search's knobs by keyword, `TuneOptions`' fields: max_workers, batches, epochs, step,
            radius, min_gain, device, verbose.
    """
    opts = TuneOptions(**options)
    dev = _default_device(opts.device)
    cores = usable_cores()
    cap = 2 * cores if opts.max_workers is None else opts.max_workers
    pins = [p for p in dict.fromkeys(pin_memory) if dev.type == "cuda" or not p] or [False]
    runner = _InProcessTrials(dataset=dataset, batch_size=batch_size, collate_fn=collate_fn, options=opts, device=dev)
    best = {
        pin: search_workers(
            functools.partial(runner.measure, pin),
            max_workers=cap,
            step=opts.step,
            radius=opts.radius,
            min_gain=opts.min_gain,
        )
        for pin in pins
    }
    chosen = best_trial(runner.trials, best, opts.min_gain)
    if chosen is None:
        raise RuntimeError("every trial failed:\n" + table(runner.trials, None, NO_RAM))
    return WorkerPick(
        num_workers=chosen.num_workers,
        pin_memory=chosen.pin_memory,
        img_s=chosen.img_s or 0.0,
        trials=runner.trials,
        table=table(runner.trials, chosen, NO_RAM),
    )


@dataclass
class _InProcessTrials:
    """tune_workers' trials, each timed in the caller's process, and kept."""

    dataset: Dataset
    batch_size: int
    collate_fn: Optional[Callable[[List[Any]], Any]]
    options: TuneOptions
    device: torch.device
    trials: List[Trial] = field(default_factory=list)

    def measure(self, pin: bool, workers: int, phase: str) -> Optional[float]:
        """One trial's images/s, None where it failed; the search goes on either way."""
        loader = DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=workers,
            pin_memory=pin,
            collate_fn=self.collate_fn,
            drop_last=False,
        )
        try:
            times = time_epochs(
                loader,
                lambda b: map_tensors(b, lambda t: t.to(self.device, non_blocking=pin)),  # the step: the batch copied
                max(self.options.epochs, 2),
                device=self.device,
                max_batches=self.options.batches,
            )
            status, summary, error = "FINISHED", times.summary, ""
        except Exception as err:  # noqa: BLE001 - a trial that fails is reported and the search goes on
            status, summary, error = "FAILED", {}, f"{type(err).__name__}: {err}"
        trial = Trial(
            pin_memory=pin, num_workers=workers, phase=phase, status=status, run_id="", summary=summary, error=error
        )
        self.trials.append(trial)
        if self.options.verbose:
            print(
                f"  {phase:<6} pin_memory={pin} num_workers={workers:<3} "
                + (f"{trial.img_s:>10.0f} img/s" if trial.img_s else trial.error),
                flush=True,
            )
        return trial.img_s


@dataclass
class EpochTimes:
    """Each epoch's figures (wif.measure.epochs), and the summary past the `warmup_epochs`, as train.py has them."""

    epochs: List[Dict[str, float]]
    warmup_epochs: int
    measured: List[Dict[str, float]] = field(init=False)
    summary: Dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.measured = epoch_account.steady(self.epochs, self.warmup_epochs)
        self.summary = epoch_account.summary(self.epochs, self.warmup_epochs)

    median_s = property(lambda self: self.summary[names.EPOCH_TIME_MEDIAN_S])
    mean_s = property(lambda self: self.summary[names.EPOCH_TIME_MEAN_S])
    img_s = property(lambda self: self.summary[names.THROUGHPUT_MEAN_IMG_S])
    data_wait_share = property(lambda self: self.summary[names.DATA_WAIT_SHARE_MEAN])


@dataclass(frozen=True)
class TimingOptions:
    """How `time_epochs` times and logs: its keyword arguments.

    Args:
        device: the device synchronized and timed; None for the current CUDA device, else the CPU.
        warmup_epochs: epochs left out of the summary where more run.
        max_batches: batches an epoch at most; None for the whole loader.
        mlflow_experiment: where every epoch and the summary are logged; None logs nothing.
        run_name: the MLflow run's name.
    """

    device: Optional[torch.device | str] = None
    warmup_epochs: int = 1
    max_batches: Optional[int] = None
    mlflow_experiment: Optional[str] = None
    run_name: Optional[str] = None


def time_epochs(loader: Iterable[Any], step: Callable[[Any], Any], epochs: int = 3, **options: Any) -> EpochTimes:
    """Times `epochs` passes of `step(batch)` over `loader` as wif times its own.

    The device is synchronized at each epoch's start and end only. The host's wait in `next()` is summed as data
    wait. The step's time is summed as compute, by CUDA events read after the epoch's sync. `step` should not read
    values off the device per batch, as `.item()` does: that synchronizes and hides the overlap being measured.

    Args:
        loader: the batches, any iterable.
        step: the user's step, called on each batch.
        epochs: the passes timed.
        **options: `TimingOptions`' fields by keyword: device, warmup_epochs, max_batches, mlflow_experiment,
            run_name.
    """
    opts = TimingOptions(**options)
    dev = _default_device(opts.device)
    batches = loader if opts.max_batches is None else CappedBatches(loader, opts.max_batches)
    size = getattr(loader, "batch_size", None) or 1
    out: List[Dict[str, float]] = []
    for epoch in range(epochs):
        stats = _timed_epoch(batches, step, dev, size)
        measured = {k: v for k, v in epoch_account.figures(asdict(stats)).items() if v is not None}
        out.append({"epoch": epoch, **measured, "samples": stats.samples})
    times = EpochTimes(out, opts.warmup_epochs if epochs > opts.warmup_epochs else 0)
    if opts.mlflow_experiment:
        _log(times, opts.mlflow_experiment, opts.run_name)
    return times


def _timed_epoch(batches: Iterable[Any], step: Callable[[Any], Any], device: torch.device, size: int) -> Any:
    """One pass of `step` over `batches`, timed: its EpochStats, the step's copies counted as its compute.

    Args:
        batches: the epoch's batches.
        step: the user's step.
        device: the device synchronized at the epoch's start and end.
        size: the samples a batch with no tensor of a batch dimension counts as.
    """
    clock = StepClock(device)
    feed = TimedFeed(batches, lambda batch: batch, count=lambda batch: samples_in(batch, size))
    synchronize(device)  # sync point: nothing from before is counted in this epoch
    t_start, t0 = time.monotonic(), time.perf_counter()
    for batch in feed:  # a DataLoader's workers end with the pass, not during the next epoch
        clock.start()
        step(batch)
        clock.stop()
    synchronize(device)  # sync point: the epoch's queued work is done
    stats = feed.stats(t_start=t_start, t0=t0, train_loss=None, compute_s=clock.compute_s(), gpu_idle_s=None)
    return replace(stats, copy_s=0.0)  # the step copies its own batches: their time is the step's, as in wif.watch


def _log(times: EpochTimes, experiment: str, run_name: Optional[str]) -> None:
    """One MLflow run of the epochs and their summary, tagged `wif.kind=user`."""
    import mlflow

    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name, tags={names.TAG_KIND: "user"}):
        mlflow.log_param("warmup_epochs", times.warmup_epochs)
        for e in times.epochs:
            mlflow.log_metrics({k: v for k, v in e.items() if k != "epoch"}, step=int(e["epoch"]))
        mlflow.log_metrics(times.summary)
