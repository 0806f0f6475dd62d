"""One run of the study, start to finish: data, loaders, model, epochs, test.

It reports through `emit(kind, payload)` and knows nothing of MLflow or of the process it runs in. So tests
can call `train` directly, and the job supervisor can run it in an isolated child process.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any, Callable, Dict, Iterator, Optional, Protocol

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, Sampler

from wif.config import Config, TrainerMode, TransferKind
from wif.data.decode import device_decode
from wif.data.formats.splits import EpochStorage
from wif.data.loaders import Batch, Batches
from wif.data.transfer import StreamPrefetcher, Transfer, make_transfer
from wif.measure import names
from wif.measure.epochs import EpochStats
from wif.measure.timing import synchronize
from wif.run.batches import MB, Built, Emit, build_loaders, compile_batch
from wif.run.loop import evaluate, loader_epoch, train_epoch
from wif.run.model import build_model
from wif.run.step import Step, build_optimizer, compile_now, prepare_model, step_for
from wif.run.stopping import STOP


class Ranks(Protocol):
    """What `train` asks of one rank of a data-parallel run (trainer.nproc>1, wif.run.ddp.rank)."""

    def sampler(self, dataset: Dataset, shuffle: bool) -> Sampler:
        """This rank's shard of a split."""

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as a DistributedDataParallel replica."""

    def begin_epoch(self, epoch: int) -> None:
        """set_epoch on the shards, then the ranks meet."""


def device_info(device: torch.device) -> Dict[str, Any]:
    """What the supervisor needs to find this device in NVML, and what a reader needs to trust a figure."""
    if device.type != "cuda":
        return {"type": "cpu", "name": "none"}
    props = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "name": props.name,
        "uuid": str(props.uuid),
        "index": device.index or 0,
        "cuda": torch.version.cuda,
        "capability": f"{props.major}.{props.minor}",
    }


class CappedBatches:
    """trainer.max_batches: the first `limit` batches of each epoch; wif-tune times a fixed number."""

    def __init__(self, batches: Batches, limit: int) -> None:
        self.batches, self.limit = batches, limit

    def __iter__(self) -> Iterator[Batch]:
        return islice(iter(self.batches), self.limit)

    def __len__(self) -> int:
        return min(len(self.batches), self.limit)


def _vram_peaks(device: torch.device) -> Dict[str, float]:
    """torch's allocator peaks on a CUDA device; none on a CPU."""
    if device.type != "cuda":
        return {}
    return {
        names.VRAM_PEAK_ALLOCATED_MB: torch.cuda.max_memory_allocated(device) / MB,
        names.VRAM_PEAK_RESERVED_MB: torch.cuda.max_memory_reserved(device) / MB,
    }


def start_device(cfg: Config, device: torch.device, emit: Emit) -> None:
    """Seed Python, NumPy and torch, take the device and its thread count; emits the device and the thread count."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    emit("device", device_info(device))
    if cfg.trainer.threads is not None:  # before the model's first op and any worker (engines restore this count)
        torch.set_num_threads(cfg.trainer.threads)
    # Each epoch's `compute_threads` is compared with this count: an engine's workers may change it.
    emit("tags", {names.TAG_TORCH_THREADS: str(torch.get_num_threads())})


@dataclass
class Feed:
    """Each split's batches as the loop iterates them, and how a batch reaches the device."""

    loaders: Dict[str, Batches]
    transfer: Transfer
    decoded: Callable[[], Dict[str, float]]  # images decoded on a slow path since the last call


def wrap_transfer(cfg: Config, device: torch.device, emit: Emit, loaders: Dict[str, Batches]) -> Feed:
    """Cap the training batches, then wrap every split for its transfer to the device.

    Args:
        cfg: the run's configuration.
        device: where the batches go.
        emit: takes the device decoder's tags under data.decode=device.
        loaders: each split's host batches.
    """
    if cfg.trainer.max_batches is not None:
        loaders = {**loaders, "train": CappedBatches(loaders["train"], cfg.trainer.max_batches)}
    decode = device_decode(cfg.data, device, cfg.transfer.non_blocking)  # data.decode=device: decoded in transfer
    if decode is not None:
        emit("tags", decode.tags())
    if cfg.transfer.kind is TransferKind.stream:  # wraps the capped batches: never prefetches past the cap
        loaders = {
            name: StreamPrefetcher(
                b, device, non_blocking=cfg.transfer.non_blocking, uint8=cfg.transfer.uint8, decode=decode
            )
            for name, b in loaders.items()
        }
    transfer = make_transfer(cfg.transfer, device, decode)
    return Feed(loaders=loaders, transfer=transfer, decoded=decode.epoch_figures if decode is not None else dict)


@dataclass
class Epochs:
    """The run's epochs: what surrounds each one, and where its figures go."""

    limit: int  # trainer.epoch_limit; under trainer.epochs=auto the supervisor answers STOP once pinned
    device: torch.device
    emit: Emit
    feed: Feed
    storage: EpochStorage  # evicts the data's files before each epoch under data.page_cache=cold
    ranks: Optional[Ranks] = None

    def run(self, one_epoch: Callable[[], EpochStats], validation: Callable[[], Dict[str, float]]) -> None:
        """Run `one_epoch`, then `validation`, until the limit or the supervisor's STOP; emits each epoch's figures."""
        for epoch in range(self.limit):
            if self.ranks is not None:
                self.ranks.begin_epoch(epoch)
            self.storage.before()
            self.feed.decoded()
            stats = one_epoch()
            read = {**self.storage.after(), **self.feed.decoded()}
            val = validation()
            figures = {"epoch": epoch, **asdict(stats), **val, **read, **_vram_peaks(self.device)}
            if self.emit("epoch", figures) == STOP:
                break


def run_loader_only(epochs: Epochs, t_setup: float) -> None:
    """trainer.mode=loader_only: no model, the loader and transfer alone, timed the same way."""
    device, feed = epochs.device, epochs.feed
    synchronize(device)
    epochs.emit("setup", {names.SETUP_S: time.perf_counter() - t_setup})
    epochs.run(lambda: loader_epoch(feed.loaders["train"], feed.transfer, device), dict)
    epochs.emit("result", _vram_peaks(device))


def build_step(cfg: Config, device: torch.device, emit: Emit, built: Built, ranks: Optional[Ranks]) -> Step:
    """The model on the device, wrapped for its rank, and the step that trains it.

    Args:
        cfg: the run's configuration.
        device: where the model trains.
        emit: takes, under fp16 on CUDA, whether GradScaler reads found_inf every step.
        built: the run's batches and classes.
        ranks: this rank of several, or None.
    """
    tr = cfg.trainer
    model = prepare_model(build_model(cfg.model, built.num_classes).to(device), tr)
    if ranks is not None:
        model = ranks.wrap(model)
    step = step_for(model, build_optimizer(tr, model.parameters(), device), cfg, device)
    if step.scaler is not None and device.type == "cuda":
        emit("tags", {"wif.step_syncs": str(step.syncs_every_step()).lower()})
    return step


def time_setup(cfg: Config, step: Step, built: Built, feed: Feed, emit: Emit) -> None:
    """Emit the set-up's seconds, and torch.compile's apart from them under trainer.compile.

    Args:
        cfg: the run's configuration.
        step: the step, on its device.
        built: the run's batches, and when the set-up began.
        feed: the batches as the loop iterates them.
        emit: where the figures go.
    """
    synchronize(step.device)
    setup_s = time.perf_counter() - built.t_setup
    # torch.compile compiles at the first call: on one real batch here, timed apart from setup and epochs.
    compile_s = None
    if cfg.trainer.compile:
        batch = compile_batch(cfg, loader=feed.loaders["train"], train_set=built.train_set, transfer=feed.transfer)
        compile_s = compile_now(step, batch, step.device)
    emit("setup", {names.SETUP_S: setup_s, **({names.COMPILE_S: compile_s} if cfg.trainer.compile else {})})


def validation_figures(step: Step, feed: Feed) -> Dict[str, float]:
    """The validation split's figures after an epoch; none at data.val_split=0."""
    if "val" not in feed.loaders:
        return {}
    val = evaluate(step, feed.loaders["val"], feed.transfer)
    return {names.VAL_LOSS: val.loss, names.VAL_ACC: val.acc, names.VAL_TIME_S: val.seconds}


def run_test(step: Step, feed: Feed, emit: Emit) -> None:
    """Emit the test split's figures and the run's VRAM peaks."""
    test = evaluate(step, feed.loaders["test"], feed.transfer)
    result = {"test_loss": test.loss, names.TEST_ACC: test.acc, names.TEST_TIME_S: test.seconds}
    emit("result", {**result, **_vram_peaks(step.device)})


def train(cfg: Config, device: torch.device, emit: Emit, ranks: Optional[Ranks] = None) -> None:
    """Run one configuration; every figure it measures leaves through `emit`.

    Args:
        cfg: the run's configuration.
        device: where it trains.
        emit: takes each message; its answer to an epoch may be STOP.
        ranks: this process is one rank of several (trainer.nproc>1); None: the only one.
    """
    start_device(cfg, device, emit)
    built = build_loaders(cfg, device, emit, sampler=ranks.sampler if ranks is not None else None)
    feed = wrap_transfer(cfg, device, emit, loaders=built.loaders)
    epochs = Epochs(
        limit=cfg.trainer.epoch_limit,
        device=device,
        emit=emit,
        feed=feed,
        storage=EpochStorage(cfg.data),
        ranks=ranks,
    )
    if cfg.trainer.mode is TrainerMode.loader_only:
        run_loader_only(epochs, built.t_setup)
        return
    step = build_step(cfg, device, emit, built=built, ranks=ranks)
    time_setup(cfg, step, built=built, feed=feed, emit=emit)
    epochs.run(lambda: train_epoch(step, feed.loaders["train"], feed.transfer), lambda: validation_figures(step, feed))
    run_test(step, feed, emit)
