"""One run of the study, start to finish: data, loaders, model, epochs, test.

It reports through `emit(kind, payload)` and knows nothing of MLflow or of the process it runs in, so
tests can call `train` directly and the job supervisor can run it in an isolated child process.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from itertools import islice
from typing import Any, Callable, Dict, Iterator, Optional, Protocol, Tuple

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, Sampler, default_collate

from wif.config import Config, ConfigError, DataSource, EngineName, TrainerMode, TransferKind
from wif.data.custom import custom_datasets
from wif.data.datasets import Datasets, Split, load_datasets, split_indices
from wif.data.decode import device_decode, encoded_datasets
from wif.data.engines import build_engine_batches
from wif.data.formats.splits import EpochStorage, format_datasets
from wif.data.loaders import Batch, Batches, FixedBatches
from wif.data.transfer import StreamPrefetcher, Transfer, make_transfer
from wif.measure.timing import synchronize
from wif.run.heap import keep_heap
from wif.run.loop import evaluate, loader_epoch, train_epoch
from wif.run.model import build_model
from wif.run.step import Step, build_optimizer, compile_now, prepare_model
from wif.run.stopping import STOP

Emit = Callable[[str, Dict[str, Any]], Any]  # an epoch's answer: STOP ends the run
MB = 1024 * 1024


class Ranks(Protocol):
    """What `train` asks of one rank of a data-parallel run (trainer.nproc>1, wif.run.ddp.rank); without it,
    `train` is the one-process run it always was."""

    def sampler(self, dataset: Dataset, shuffle: bool) -> Sampler: ...  # this rank's shard of a split

    def wrap(self, model: nn.Module) -> nn.Module: ...  # DistributedDataParallel

    def begin_epoch(self, epoch: int) -> None: ...  # set_epoch on the shards, then the ranks meet


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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


def _to_device(data: Datasets, device: torch.device, image_size: int) -> Datasets:
    """gpu_resident: move every split, after checking it fits; the host copies are then dropped.

    Images decoded per sample are decoded once here (no augmentation): decoding cannot happen on the
    device, so the run is tagged `wif.resident_decoded`.
    """
    splits = [s if isinstance(s, Split) else s.materialize(image_size) for s in (data.train, data.val, data.test)]
    need = sum(s.nbytes for s in splits)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        if need > free:
            raise ConfigError(
                f"loader=gpu_resident needs {need / MB:.0f} MiB on the device for the dataset, but "
                f"only {free / MB:.0f} of {total / MB:.0f} MiB are free. Lower data.fraction, or "
                "choose a loader option that streams batches."
            )
    train, val, test = (Split(s.images.to(device), s.labels.to(device)) for s in splits)
    return Datasets(train, val, test, data.num_classes)


class CappedBatches:
    """trainer.max_batches: the first `limit` batches of each epoch (wif-tune times a fixed number)."""

    def __init__(self, batches: Batches, limit: int) -> None:
        self.batches, self.limit = batches, limit

    def __iter__(self) -> Iterator[Batch]:
        return islice(iter(self.batches), self.limit)

    def __len__(self) -> int:
        return min(len(self.batches), self.limit)


def _fixed_batches(cfg: Config, device: torch.device) -> Dict[str, FixedBatches]:
    """data=fixed: as many batches as the configured split would give; validation and test one batch each
    (their figures mean nothing on random data, so they cost as little as possible)."""
    d = cfg.data
    train_idx, val_idx = split_indices(d.num_train, d.fraction, d.val_split, d.seed)
    sizes = {"train": len(train_idx), "val": min(len(val_idx), d.batch_size), "test": min(d.num_test, d.batch_size)}
    return {
        name: FixedBatches(n, d.batch_size, d.image_size, d.num_classes, device, cfg.seed + i)
        for i, (name, n) in enumerate(sizes.items())
    }


def _vram_peaks(device: torch.device) -> Dict[str, float]:
    if device.type != "cuda":
        return {}
    return {
        "vram_peak_allocated_mb": torch.cuda.max_memory_allocated(device) / MB,
        "vram_peak_reserved_mb": torch.cuda.max_memory_reserved(device) / MB,
    }


def _build_batches(
    cfg: Config, device: torch.device, emit: Emit, ranks: Optional[Ranks] = None
) -> Tuple[Dict[str, Batches], int, float, Any]:
    """Each split's batches as the loader and transfer options ask, the number of classes, and when the
    set-up began: the data load is timed apart (`data_load_s`); building loaders and, for gpu_resident,
    moving the data to the device count as set-up."""
    t0 = time.perf_counter()
    if cfg.data.source is DataSource.fixed:  # no data to load: batches are made on the device
        if device.type == "cpu":  # its activations live on the host heap, which no data load has grown
            emit("tags", {"wif.heap_kept": str(keep_heap()).lower()})
        batches: Dict[str, Batches] = dict(_fixed_batches(cfg, device))
        emit(
            "data",
            {
                **{name: b.samples for name, b in batches.items()},
                "num_classes": cfg.data.num_classes,
                "data_load_s": time.perf_counter() - t0,
            },
        )
        return batches, cfg.data.num_classes, time.perf_counter(), None
    if cfg.data.source is DataSource.custom:
        data = custom_datasets(cfg.data)
    else:
        load = format_datasets if cfg.data.format is not None else load_datasets
        data = load(cfg.data, uint8=cfg.transfer.uint8)  # uint8: normalized on the device
        if cfg.data.decode.value == "device":  # the workers hand over encoded bytes: wif.data.decode
            data = encoded_datasets(data, cfg.data)
    t_setup = time.perf_counter()
    emit(
        "data",
        {
            "train": len(data.train),
            "val": len(data.val),
            "test": len(data.test),
            "num_classes": data.num_classes,
            "data_load_s": t_setup - t0,
        },
    )
    resident = cfg.transfer.kind is TransferKind.resident
    if resident:
        emit("tags", {"wif.resident_decoded": not isinstance(data.train, Split)})
        data = _to_device(data, device, cfg.data.image_size)
    pin = cfg.loader.pin_memory and device.type == "cuda"
    batches = {
        name: build_engine_batches(
            split,
            cfg.loader,
            cfg.engine,
            cfg.data.batch_size,
            train=name == "train",
            seed=cfg.seed,
            pin=pin,
            resident=resident,
            data=cfg.data,
            device=device,
            sampler=ranks.sampler if ranks is not None else None,
        )
        for name, split in (("train", data.train), ("val", data.val), ("test", data.test))
        if name != "val" or len(split) > 0
    }
    # data.val_split=0: no validation loader at all. An empty one still starts its workers after every epoch,
    # and the forks make the next epoch's writes copy-on-write (benchmarks/your_workload.py saw +18%).
    return batches, data.num_classes, t_setup, data.train


def train(cfg: Config, device: torch.device, emit: Emit, ranks: Optional[Ranks] = None) -> None:
    """Run one configuration; every figure it measures leaves through `emit`. `ranks`: this process is one
    rank of several (trainer.nproc>1)."""
    seed_everything(cfg.seed)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    emit("device", device_info(device))
    if cfg.trainer.threads is not None:  # before the model's first op and any worker (engines restore this count)
        torch.set_num_threads(cfg.trainer.threads)
    # torch's intra-op threads as the run starts (trainer.threads, torch's default or OMP_NUM_THREADS): each
    # epoch's `compute_threads` says whether the model computed with as many (an engine's workers may change it)
    emit("tags", {"wif.torch_threads": str(torch.get_num_threads())})
    loaders, num_classes, t0, train_set = _build_batches(cfg, device, emit, ranks)
    tr = cfg.trainer
    if tr.max_batches is not None:
        loaders["train"] = CappedBatches(loaders["train"], tr.max_batches)
    decode = device_decode(cfg.data, device, cfg.transfer.non_blocking)  # data.decode=device: decoded in transfer
    if decode is not None:
        emit("tags", decode.tags())
    if cfg.transfer.kind is TransferKind.stream:  # wraps the capped batches: never prefetches past the cap
        loaders = {
            name: StreamPrefetcher(b, device, cfg.transfer.non_blocking, cfg.transfer.uint8, decode)
            for name, b in loaders.items()
        }
    transfer = make_transfer(cfg.transfer, device, decode)
    decoded = decode.epoch_figures if decode is not None else dict  # images on a slow path, per training epoch
    storage = EpochStorage(cfg.data)  # evicts the data's files before each epoch under data.page_cache=cold
    if tr.mode is TrainerMode.loader_only:  # no model: the loader and transfer alone, timed the same way
        synchronize(device)
        emit("setup", {"setup_s": time.perf_counter() - t0})
        for epoch in range(tr.epoch_limit):
            if ranks is not None:
                ranks.begin_epoch(epoch)
            storage.before()
            decoded()
            stats = loader_epoch(loaders["train"], transfer, device)
            if (
                emit("epoch", {"epoch": epoch, **asdict(stats), **storage.after(), **decoded(), **_vram_peaks(device)})
                == STOP
            ):
                break
        emit("result", _vram_peaks(device))
        return

    model = prepare_model(build_model(cfg.model, num_classes).to(device), tr)
    if ranks is not None:
        model = ranks.wrap(model)
    optimizer = build_optimizer(tr, model.parameters(), device)
    step = Step(model, optimizer, nn.CrossEntropyLoss(), cfg.model.aux_weight, device, tr.precision, tr.channels_last)
    if step.scaler is not None and device.type == "cuda":  # fp16: does GradScaler read found_inf every step?
        emit("tags", {"wif.step_syncs": str(step.syncs_every_step()).lower()})
    synchronize(device)
    setup_s = time.perf_counter() - t0
    # torch.compile compiles at the first call: on one real batch here, timed apart from setup and epochs.
    compile_s = (
        compile_now(step, compile_batch(cfg, loaders["train"], train_set, transfer), device) if tr.compile else None
    )
    emit("setup", {"setup_s": setup_s, **({"compile_s": compile_s} if tr.compile else {})})

    for epoch in range(tr.epoch_limit):  # trainer.epochs=auto: the supervisor answers STOP once pinned
        if ranks is not None:
            ranks.begin_epoch(epoch)
        storage.before()
        decoded()
        stats = train_epoch(
            model, loaders["train"], transfer, optimizer, step.loss_fn, cfg.model.aux_weight, device, step
        )
        read = {**storage.after(), **decoded()}
        val = {}
        if "val" in loaders:
            val = dict(
                zip(
                    ("val_loss", "val_acc", "val_time_s"),
                    evaluate(model, loaders["val"], transfer, step.loss_fn, device, step),
                )
            )
        if emit("epoch", {"epoch": epoch, **asdict(stats), **val, **read, **_vram_peaks(device)}) == STOP:
            break

    test_loss, test_acc, test_time = evaluate(model, loaders["test"], transfer, step.loss_fn, device, step)
    emit("result", {"test_loss": test_loss, "test_acc": test_acc, "test_time_s": test_time, **_vram_peaks(device)})


def compile_batch(cfg: Config, loader: Batches, train_set: Any, transfer: Transfer) -> Any:
    """The batch torch.compile compiles on, as the step gets it (on the device, converted or decoded there).
    Drawn from a loader with persistent workers, it would start them before the first timed epoch, whose
    `first_batch_s` would then miss their start-up: such a batch is collated here, in this process, from the
    training set's first samples instead, and sent as the loop's batches are sent (under transfer=stream by the
    prefetcher's own copy: the loop's transfer is then nothing, its batches already on the device)."""
    persistent = (
        cfg.engine.name is EngineName.dataloader
        and cfg.loader.persistent_workers
        and cfg.loader.num_workers > 0
        and train_set is not None
    )
    if not persistent:
        return transfer(next(iter(loader)))
    send = loader.copy if isinstance(loader, StreamPrefetcher) else transfer
    n = cfg.data.batch_size
    if isinstance(train_set, Split):  # tensors held in RAM
        return send((train_set.images[:n], train_set.labels[:n]))
    collate = getattr(train_set, "collate", default_collate)  # data.decode=device: its encoded batch
    if isinstance(train_set, IterableDataset):
        return send(collate(list(islice(iter(train_set), n))))
    return send(collate([train_set[i] for i in range(min(n, len(train_set)))]))
