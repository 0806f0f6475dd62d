"""How a host batch reaches the device. Kept apart from the loader so any loader option can be combined
with any transfer option on the command line."""

from __future__ import annotations

from typing import Callable

import torch

from wif.config import TransferConfig, TransferKind
from wif.loaders import Batch

Transfer = Callable[[Batch], Batch]


def make_transfer(cfg: TransferConfig, device: torch.device) -> Transfer:
    """A blocking or non_blocking copy, or nothing for batches already on the device."""
    if cfg.kind is TransferKind.resident:
        return lambda batch: batch
    non_blocking = cfg.non_blocking

    def copy(batch: Batch) -> Batch:
        x, y = batch
        return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

    return copy
