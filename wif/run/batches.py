"""A run's batches: its data loaded, and each split's loader built as the loader and engine options ask.

The data load is timed apart (`data_load_s`). Building the loaders, and under gpu_resident moving the data to
the device, count as set-up: `Built.t_setup` is when the set-up began. `compile_batch` is the batch
torch.compile compiles on before the first timed epoch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from itertools import islice
from typing import Any, Callable, Dict, NamedTuple, Optional

import torch
from torch.utils.data import IterableDataset, default_collate

from wif.config import Config, ConfigError, DataSource, EngineName, TransferKind
from wif.data.custom import custom_datasets
from wif.data.datasets import Datasets, Split, load_datasets, split_indices
from wif.data.decode import encoded_datasets
from wif.data.engines import build_engine_batches
from wif.data.formats.splits import format_datasets
from wif.data.loaders import Batches, FixedBatches, Reading, SamplerFor
from wif.data.transfer import StreamPrefetcher, Transfer
from wif.measure import names

Emit = Callable[[str, Dict[str, Any]], Any]  # an epoch's answer: STOP ends the run
MB = 1024 * 1024


class Built(NamedTuple):
    """Each split's batches, and what the rest of the run needs of the data."""

    loaders: Dict[str, Batches]  # train, test, and val unless data.val_split=0
    num_classes: int
    t_setup: float  # time.perf_counter() when the set-up began, after the data load
    train_set: Any  # the training split as loaded, for `compile_batch`; None under data=fixed


def build_loaders(cfg: Config, device: torch.device, emit: Emit, sampler: Optional[SamplerFor] = None) -> Built:
    """Load the data and build each split's batches; emits the data's sizes and tags.

    Args:
        cfg: the run's configuration.
        device: where the batches go.
        emit: where the data's figures go.
        sampler: a rank's shard of each split (trainer.nproc>1).
    """
    if cfg.data.source is DataSource.fixed:
        return _fixed_loaders(cfg, device, emit)
    t0 = time.perf_counter()
    data = _load_data(cfg)
    t_setup = time.perf_counter()
    emit(
        "data",
        {
            "train": len(data.train),
            "val": len(data.val),
            "test": len(data.test),
            "num_classes": data.num_classes,
            names.DATA_LOAD_S: t_setup - t0,
        },
    )
    resident = cfg.transfer.kind is TransferKind.resident
    if resident:
        emit("tags", {"wif.resident_decoded": not isinstance(data.train, Split)})
        data = _to_device(data, device, cfg.data.image_size)
    pin = cfg.loader.pin_memory and device.type == "cuda"
    # See NOTE [ No validation loader at data.val_split=0 ]
    loaders = {
        name: build_engine_batches(
            split,
            cfg.loader,
            cfg.engine,
            Reading(
                batch_size=cfg.data.batch_size,
                train=name == "train",
                seed=cfg.seed,
                pin=pin,
                resident=resident,
                sampler=sampler,
            ),
            data=cfg.data,
            device=device,
        )
        for name, split in (("train", data.train), ("val", data.val), ("test", data.test))
        if name != "val" or len(split) > 0
    }
    return Built(loaders=loaders, num_classes=data.num_classes, t_setup=t_setup, train_set=data.train)


# NOTE [ No validation loader at data.val_split=0 ]
# An empty validation loader still starts its workers after every epoch. Their forks make the next epoch's
# writes copy-on-write: benchmarks/your_workload.py saw +18%. So data.val_split=0 builds no loader at all.


def _load_data(cfg: Config) -> Datasets:
    """The run's three splits as the data options ask; uint8 images are normalized on the device."""
    if cfg.data.source is DataSource.custom:
        return custom_datasets(cfg.data)
    load = format_datasets if cfg.data.format is not None else load_datasets
    data = load(cfg.data, uint8=cfg.transfer.uint8)
    if cfg.data.decode.value == "device":  # the workers hand over encoded bytes: wif.data.decode
        data = encoded_datasets(data, cfg.data)
    return data


def _fixed_loaders(cfg: Config, device: torch.device, emit: Emit) -> Built:
    """data=fixed: no data to load, the batches are made on the device."""
    t0 = time.perf_counter()
    if device.type == "cpu":  # See NOTE [ The heap of a run that loads no data ]
        emit("tags", {"wif.heap_kept": str(keep_heap()).lower()})
    loaders: Dict[str, Batches] = dict(_fixed_batches(cfg, device))
    emit(
        "data",
        {
            **{name: b.samples for name, b in loaders.items()},
            "num_classes": cfg.data.num_classes,
            names.DATA_LOAD_S: time.perf_counter() - t0,
        },
    )
    return Built(loaders=loaders, num_classes=cfg.data.num_classes, t_setup=time.perf_counter(), train_set=None)


# NOTE [ The heap of a run that loads no data ]
# glibc's malloc returns the top of its heap to the OS once more than M_TRIM_THRESHOLD of it is free. It serves
# blocks above M_MMAP_THRESHOLD with mmap. Both thresholds start low, at 128 KiB, and rise as large blocks are
# freed: see "dynamic mmap threshold" in mallopt(3). A run that loads its data first has raised them before its
# first step. The bound's run, `data=fixed`, loads nothing: every step's activations were mapped and unmapped
# again. On the smoke preset that made 72,000-107,000 minor page faults an epoch against about 20, and a step
# 20-60% slower than the loaders' it is the bound of. Raising both thresholds once, as a data load would, removes
# that artifact.

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_MAX = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the largest mmap threshold it accepts
TRIM = 1 << 30


def keep_heap() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; False where the C library is not glibc."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):  # the C library's own word: confstr(3)
            return False
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_MAX)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM))
    except (OSError, AttributeError, ValueError):  # not glibc, no such library or symbol: the heap stays
        return False


def _fixed_batches(cfg: Config, device: torch.device) -> Dict[str, FixedBatches]:
    """data=fixed: as many training batches as the configured split gives; one for validation and test."""
    d = cfg.data
    train_idx, val_idx = split_indices(d.num_train, fraction=d.fraction, val_split=d.val_split, seed=d.seed)
    sizes = {"train": len(train_idx), "val": min(len(val_idx), d.batch_size), "test": min(d.num_test, d.batch_size)}
    return {
        name: FixedBatches(
            samples=n,
            batch_size=d.batch_size,
            image_size=d.image_size,
            num_classes=d.num_classes,
            device=device,
            seed=cfg.seed + i,
        )
        for i, (name, n) in enumerate(sizes.items())
    }


def _to_device(data: Datasets, device: torch.device, image_size: int) -> Datasets:
    """gpu_resident: every split moved to the device once it is known to fit; the host copies are dropped.

    Images decoded per sample are decoded once here, without augmentation; the run is tagged `wif.resident_decoded`.
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
    return Datasets(train=train, val=val, test=test, num_classes=data.num_classes)


def compile_batch(cfg: Config, loader: Batches, train_set: Any, transfer: Transfer) -> Any:
    """The batch torch.compile compiles on, as the step gets it: on the device, converted or decoded there.

    It is collated here from the training set's first samples: drawn from persistent workers, it would start them
    before the first epoch's `first_batch_s`. It is sent as the loop's batches are, by the prefetcher under stream.

    Args:
        cfg: the run's configuration.
        loader: the training batches as the loop iterates them.
        train_set: the training split as loaded; None under data=fixed.
        transfer: the loop's transfer.
    """
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
