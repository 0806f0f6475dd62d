"""The DataLoader inside whatever a loop iterates, and the anchor a watch is kept by.

People hand `wif.watch` a DataLoader, a wrapper holding one (timm's PrefetchLoader keeps it as `.loader`,
tqdm as `.iterable`), or a generator over one, and often a new wrapper, or a new DataLoader, every epoch. The
epochs of one training loader are one watch: its anchor is the DataLoader's dataset, however it is wrapped
and however often the DataLoader is made; an iterable with no DataLoader inside is its own anchor.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch.utils.data import DataLoader

HOLDERS = ("loader", "_loader", "dataloader", "data_loader", "_dataloader", "base_loader", "train_loader", "iterable")
LEAVES = (str, bytes, int, float, torch.Tensor, dict, list, tuple)
Found = Tuple[Any, str, DataLoader]  # (holder, attribute, the DataLoader); holder None: it is one


def find_dataloader(batches: Any, depth: int = 3) -> Optional[Found]:
    """(holder, attribute, DataLoader) for the DataLoader inside `batches` (holder None: it is one; attribute
    "": it cannot be swapped, as a generator's local); None where there is none. Wrappers are searched by
    the usual attribute names first, then every attribute; a generator in its frame's locals."""
    if isinstance(batches, DataLoader):
        return None, "", batches
    if depth == 0:
        return None
    frame = getattr(batches, "gi_frame", None)  # a generator over the loader, started or not
    if frame is not None:
        for value in list(frame.f_locals.values()):
            if value is not None and not isinstance(value, LEAVES):
                found = find_dataloader(value, depth - 1)
                if found is not None:
                    return batches, "", found[2]
        return None
    attrs = getattr(batches, "__dict__", {})
    for name in [n for n in HOLDERS if n in attrs] + [n for n in attrs if n not in HOLDERS]:
        value = attrs[name]
        if isinstance(value, DataLoader):
            return batches, name, value
        if value is not None and not isinstance(value, LEAVES):
            found = find_dataloader(value, depth - 1)
            if found is not None:
                return (found[0] or batches, found[1] if found[0] is not None else name, found[2])
    return None


def anchor_of(batches: Any) -> Any:
    """What one watch is kept by: the dataset of the DataLoader inside, else the iterable itself."""
    found = find_dataloader(batches)
    return found[2].dataset if found is not None else batches


def batch_size_of(loader: DataLoader) -> Optional[int]:
    """The samples a batch holds as the loader makes them: its batch_size, its own batch sampler's, or for a
    batch sampler without one, the mean over an epoch (its dataset's length over its batches); None where the
    loader does not batch (batch_size=None without a sampler: each item is a batch) or cannot tell."""
    if loader.batch_size:
        return int(loader.batch_size)
    sampler = loader.batch_sampler
    if sampler is None:
        return None
    size = getattr(sampler, "batch_size", None)
    if size:
        return int(size)
    try:
        return max(1, round(len(loader.dataset) / len(sampler)))
    except (TypeError, ZeroDivisionError):
        return None


def settings_of(batches: Any, loader: Optional[DataLoader]) -> Dict[str, Any]:
    """The loader's settings as the run's params (what `wif-advise` keeps or changes)."""
    name = getattr(batches, "wif_name", type(batches).__name__)  # a hooked DataLoader's epoch: its class
    if loader is None:
        return {"loader": name}
    return {
        "loader": name,
        "batch_size": batch_size_of(loader),
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "in_order": getattr(loader, "in_order", True),
        "drop_last": loader.drop_last,
        "dataset_len": length_of(loader.dataset),
    }


def length_of(sized: Any) -> Optional[int]:
    try:
        return len(sized)
    except TypeError:  # an IterableDataset without a length
        return None
