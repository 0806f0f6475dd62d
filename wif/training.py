"""One run of the study, start to finish: data, loaders, model, epochs, test.

It reports through `emit(kind, payload)` and knows nothing of MLflow or of the process it runs in, so
tests can call `train` directly and the job supervisor can run it in an isolated child process.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import asdict
from typing import Any, Callable, Dict

import numpy as np
import torch
from torch import nn

from wif.config import Config, ConfigError, TransferKind
from wif.data import Datasets, Split, load_datasets
from wif.loaders import build_batches
from wif.loop import evaluate, train_epoch
from wif.model import build_model
from wif.timing import synchronize
from wif.transfer import make_transfer

Emit = Callable[[str, Dict[str, Any]], None]
MB = 1024 * 1024


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def device_info(device: torch.device) -> Dict[str, Any]:
    """What the supervisor needs to find this device in NVML, and what a reader needs to trust a figure."""
    if device.type != "cuda":
        return {"type": "cpu", "name": "none"}
    props = torch.cuda.get_device_properties(device)
    return {"type": "cuda", "name": props.name, "uuid": str(props.uuid), "index": device.index or 0,
            "cuda": torch.version.cuda, "capability": f"{props.major}.{props.minor}"}


def _to_device(data: Datasets, device: torch.device) -> Datasets:
    """gpu_resident: move every split, after checking it fits; the host copies are then dropped."""
    need = data.train.nbytes + data.val.nbytes + data.test.nbytes
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        if need > free:
            raise ConfigError(f"loader=gpu_resident needs {need / MB:.0f} MiB on the device for the dataset, but "
                              f"only {free / MB:.0f} of {total / MB:.0f} MiB are free. Lower data.fraction, or "
                              "choose a loader option that streams batches.")
    move = lambda s: Split(s.images.to(device), s.labels.to(device))  # noqa: E731
    return Datasets(move(data.train), move(data.val), move(data.test), data.num_classes)


def train(cfg: Config, device: torch.device, emit: Emit) -> None:
    """Run one configuration; every figure it measures leaves through `emit`."""
    seed_everything(cfg.seed)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    emit("device", device_info(device))

    t0 = time.perf_counter()
    data = load_datasets(cfg.data)
    data_load_s = time.perf_counter() - t0
    emit("data", {"train": len(data.train), "val": len(data.val), "test": len(data.test),
                  "num_classes": data.num_classes, "data_load_s": data_load_s})

    t0 = time.perf_counter()
    resident = cfg.transfer.kind is TransferKind.resident
    if resident:
        data = _to_device(data, device)
    pin = cfg.loader.pin_memory and device.type == "cuda"
    batch = cfg.data.batch_size
    loaders = {name: build_batches(split, cfg.loader, batch, train=name == "train", seed=cfg.seed, pin=pin,
                                   resident=resident)
               for name, split in (("train", data.train), ("val", data.val), ("test", data.test))}
    transfer = make_transfer(cfg.transfer, device)
    model = build_model(cfg.model, data.num_classes).to(device)
    tr = cfg.trainer
    optimizer = torch.optim.SGD(model.parameters(), lr=tr.lr, momentum=tr.momentum, weight_decay=tr.weight_decay)
    loss_fn, eval_loss = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
    synchronize(device)
    emit("setup", {"setup_s": time.perf_counter() - t0})

    for epoch in range(tr.epochs):
        stats = train_epoch(model, loaders["train"], transfer, optimizer, loss_fn, cfg.model.aux_weight, device)
        val_loss, val_acc, val_time = evaluate(model, loaders["val"], transfer, eval_loss, device)
        emit("epoch", {"epoch": epoch, **asdict(stats), "val_loss": val_loss, "val_acc": val_acc,
                       "val_time_s": val_time})

    test_loss, test_acc, test_time = evaluate(model, loaders["test"], transfer, eval_loss, device)
    result: Dict[str, Any] = {"test_loss": test_loss, "test_acc": test_acc, "test_time_s": test_time}
    if device.type == "cuda":
        result["vram_peak_allocated_mb"] = torch.cuda.max_memory_allocated(device) / MB
        result["vram_peak_reserved_mb"] = torch.cuda.max_memory_reserved(device) / MB
    emit("result", result)


@functools.lru_cache(maxsize=None)
def preload() -> None:
    """Pay one-time import costs once, in the supervising process, so every forked run starts warm.

    Building the first optimizer imports torch._dynamo (about 2 s here). Nothing here touches CUDA.
    """
    import prefetch_generator  # noqa: F401
    import torchvision.models  # noqa: F401

    torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
