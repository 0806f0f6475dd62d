"""wif from the user's own training script (the habit of pasting a worker search into `main_worker` of
PyTorch's ImageNet example; docs/your-workload.md).

    import wif
    pick = wif.tune_workers(train_set, batch_size=256)          # the wif-tune search, in this process
    loader = DataLoader(train_set, batch_size=256, num_workers=pick.num_workers, pin_memory=pick.pin_memory)
    times = wif.time_epochs(loader, my_step, epochs=3)          # wif's epoch clock around your own step

Both run in the caller's process on any Dataset and loop: no Hydra, no forked child, no memory sampler (a
train.py run records those). `time_epochs` can log its figures to MLflow, tagged `wif.kind=user` so the
study's report never mixes them with its own runs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from wif.measure import epochs as epoch_account
from wif.measure.timing import StepClock, synchronize
from wif.run.loop import TimedFeed, map_tensors, samples_in
from wif.run.training import CappedBatches
from wif.tools.tune import Trial, final_pick, search_workers, table

# Its trials run in the caller's process, with no sampler beside them (a sampler thread there would share the
# GIL with the loop it times): wif-tune's trials, each a supervised run, measure the tree's PSS.
NO_RAM = "wif.tune_workers runs its trials in your process, without wif-tune's memory sampler; wif-tune measures it"


def _default_device(device: Optional[torch.device | str]) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _as_is(batch: Any) -> Any:
    return batch


def _to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    return map_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))


# ----------------------------------------------------------------------------- tune_workers
@dataclass
class WorkerPick:
    """The pick (fewest workers within `min_gain` of the fastest, then no pinning) and every trial."""

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


def tune_workers(
    dataset: Dataset,
    batch_size: int = 64,
    pin_memory: Sequence[bool] = (False, True),
    collate_fn: Optional[Callable[[List[Any]], Any]] = None,
    *,
    max_workers: Optional[int] = None,
    batches: int = 50,
    epochs: int = 3,
    step: int = 4,
    radius: int = 3,
    min_gain: float = 0.05,
    device: Optional[torch.device | str] = None,
    verbose: bool = True,
) -> WorkerPick:
    """The search `wif-tune` runs (`wif.tools.tune.search_workers`), on the caller's Dataset: for each
    pin_memory, num_workers from 0 up in coarse steps until more stop helping, then every count near the
    best; each trial iterates `batches` batches for `epochs` epochs (the first left out) and copies them to
    the device. Without CUDA only pin_memory=False is tried (pinning has no effect on the CPU)."""
    import os

    dev = _default_device(device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cap = 2 * cores if max_workers is None else max_workers
    pins = [p for p in dict.fromkeys(pin_memory) if dev.type == "cuda" or not p] or [False]
    trials: List[Trial] = []

    def measure(pin: bool, workers: int, phase: str) -> Optional[float]:
        loader = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            num_workers=workers,
            pin_memory=pin,
            collate_fn=collate_fn,
            drop_last=False,
        )
        try:
            times = time_epochs(
                loader, lambda b: _to_device(b, dev, pin), max(epochs, 2), device=dev, max_batches=batches
            )
            trial = Trial(pin, workers, phase, "FINISHED", "", times.summary)
        except Exception as err:  # noqa: BLE001 - a trial that fails is reported and the search goes on
            trial = Trial(pin, workers, phase, "FAILED", "", {}, f"{type(err).__name__}: {err}")
        trials.append(trial)
        if verbose:
            print(
                f"  {phase:<6} pin_memory={pin} num_workers={workers:<3} "
                + (f"{trial.img_s:>10.0f} img/s" if trial.img_s else trial.error),
                flush=True,
            )
        return trial.img_s

    best = {
        pin: search_workers(lambda w, ph: measure(pin, w, ph), cap, step, radius, min_gain)  # noqa: B023
        for pin in pins
    }
    scores = {
        (pin, w): next(t.img_s for t in trials if (t.pin_memory, t.num_workers) == (pin, w))
        for pin, w in best.items()
        if w is not None
    }
    if not scores:
        raise RuntimeError("every trial failed:\n" + table(trials, None, NO_RAM))
    pin, workers = final_pick(scores, min_gain)
    chosen = next(t for t in trials if (t.pin_memory, t.num_workers) == (pin, workers))
    return WorkerPick(workers, pin, chosen.img_s or 0.0, trials, table(trials, chosen, NO_RAM))


# ----------------------------------------------------------------------------- time_epochs
@dataclass
class EpochTimes:
    """Per-epoch figures (wif.measure.epochs.figures, with samples) and the summary over the measured epochs
    (the first `warmup_epochs` left out), as a train.py run and wif.watch summarize theirs."""

    epochs: List[Dict[str, float]]
    warmup_epochs: int
    measured: List[Dict[str, float]] = field(init=False)
    summary: Dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.measured = epoch_account.steady(self.epochs, self.warmup_epochs)
        self.summary = epoch_account.summary(self.epochs, self.warmup_epochs)

    median_s = property(lambda self: self.summary["epoch_time_median_s"])
    mean_s = property(lambda self: self.summary["epoch_time_mean_s"])
    img_s = property(lambda self: self.summary["throughput_mean_img_s"])
    data_wait_share = property(lambda self: self.summary["data_wait_share_mean"])


def time_epochs(
    loader: Iterable[Any],
    step: Callable[[Any], Any],
    epochs: int = 3,
    *,
    device: Optional[torch.device | str] = None,
    warmup_epochs: int = 1,
    max_batches: Optional[int] = None,
    mlflow_experiment: Optional[str] = None,
    run_name: Optional[str] = None,
) -> EpochTimes:
    """Time `epochs` passes of `step(batch)` over `loader` as wif times its own: the device synchronized at
    each epoch's start and end only; the host's wait in `next()` summed as data wait; the step's time as
    compute (CUDA events on the device, read after the epoch's sync). `step` should not read values off the
    device (`.item()`) per batch: that synchronizes and hides the overlap being measured. With
    `mlflow_experiment`, every epoch and the summary are logged to a run in that experiment."""
    dev = _default_device(device)
    batches = loader if max_batches is None else CappedBatches(loader, max_batches)
    size = getattr(loader, "batch_size", None) or 1
    out: List[Dict[str, float]] = []
    for epoch in range(epochs):
        clock = StepClock(dev)
        feed = TimedFeed(batches, _as_is, lambda batch: samples_in(batch, size))
        synchronize(dev)  # sync point: nothing from before is counted in this epoch
        t_start, t0 = time.monotonic(), time.perf_counter()
        for batch in feed:  # a DataLoader's workers end with the pass, not during the next epoch
            clock.start()
            step(batch)
            clock.stop()
        synchronize(dev)  # sync point: the epoch's queued work is done
        # the step copies its own batches: their time is the step's, as in wif.watch
        stats = replace(feed.stats(t_start, t0, None, clock.compute_s(), None), copy_s=0.0)
        measured = {k: v for k, v in epoch_account.figures(asdict(stats)).items() if v is not None}
        out.append({"epoch": epoch, **measured, "samples": stats.samples})
    times = EpochTimes(out, warmup_epochs if epochs > warmup_epochs else 0)
    if mlflow_experiment:
        _log(times, mlflow_experiment, run_name)
    return times


def _log(times: EpochTimes, experiment: str, run_name: Optional[str]) -> None:
    import mlflow

    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=run_name, tags={"wif.kind": "user"}):
        mlflow.log_param("warmup_epochs", times.warmup_epochs)
        for e in times.epochs:
            mlflow.log_metrics({k: v for k, v in e.items() if k != "epoch"}, step=int(e["epoch"]))
        mlflow.log_metrics(times.summary)
