"""The DataLoader inside whatever a loop iterates, and the anchor a watch is kept by.

People hand `wif.watch` a DataLoader, a wrapper holding one, or a generator over one. timm's PrefetchLoader
keeps it as `.loader`, tqdm as `.iterable`. Many make a new wrapper, or a new DataLoader, every epoch.
The epochs of one training loader are one watch: its anchor is the DataLoader's dataset. An iterable with no
DataLoader inside is its own anchor; one made anew each epoch is kept by its loop (wif.watcher.watch._key).
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import torch
from torch.utils.data import DataLoader

from wif.dataloader_args import BY_NAME, ORDERED

HOLDERS = ("loader", "_loader", "dataloader", "data_loader", "_dataloader", "base_loader", "train_loader", "iterable")
LEAVES = (str, bytes, int, float, torch.Tensor, dict, list, tuple)


class Found(NamedTuple):
    """Where the DataLoader inside an iterable is, so that orders can swap it.

    `holder` None: the iterable is the DataLoader. `attribute` "": it cannot be swapped, as a generator's local.
    """

    holder: Any
    attribute: str
    loader: DataLoader


def is_dataloader(value: Any) -> bool:
    """Whether `value` is a DataLoader by its type, not by what it says it is.

    accelerate's DataLoaderShard passes for one (its `__class__` is its DataLoader's) and iterates the real one,
    its `base_dataloader`. Orders must replace that one: a copy of the shard would iterate the same.
    """
    return issubclass(type(value), DataLoader)


def find_dataloader(batches: Any, depth: int = 3) -> Optional[Found]:
    """The DataLoader inside `batches` and where it is held; None where there is none.

    Wrappers are searched by the usual attribute names first, then every attribute; a generator in its
    frame's locals.
    """
    if is_dataloader(batches):
        return Found(None, "", batches)
    if depth == 0:
        return None
    frame = getattr(batches, "gi_frame", None)  # a generator over the loader, started or not
    if frame is not None:
        return _in_generator(batches, frame, depth)
    return _in_attributes(batches, depth)


def _in_generator(generator: Any, frame: Any, depth: int) -> Optional[Found]:
    """The DataLoader among a generator's locals, held where it cannot be swapped."""
    for value in list(frame.f_locals.values()):
        found = _inside(value, depth)
        if found is not None:
            return Found(generator, "", found.loader)
    return None


def _in_attributes(holder: Any, depth: int) -> Optional[Found]:
    """The DataLoader among an object's attributes, the usual holders' names first."""
    attrs = getattr(holder, "__dict__", {})
    for name in [n for n in HOLDERS if n in attrs] + [n for n in attrs if n not in HOLDERS]:
        value = attrs[name]
        if is_dataloader(value):
            return Found(holder, name, value)
        found = _inside(value, depth)
        if found is not None:  # held deeper: the innermost holder and its attribute
            inner = found.holder is not None
            return Found(found.holder or holder, found.attribute if inner else name, found.loader)
    return None


def _inside(value: Any, depth: int) -> Optional[Found]:
    """The DataLoader one level down in `value`, skipping values that hold none."""
    if value is None or isinstance(value, LEAVES):
        return None
    return find_dataloader(value, depth - 1)


def anchor_of(batches: Any) -> Any:
    """What one watch is kept by: the dataset of the DataLoader inside, else the iterable itself."""
    found = find_dataloader(batches)
    return found.loader.dataset if found is not None else batches


def batch_size_of(loader: DataLoader) -> Optional[int]:
    """The samples a batch holds as the loader makes them; None where it cannot tell.

    That is its batch_size, or its batch sampler's. A batch sampler without one gives the mean over an epoch.
    None also where the loader does not batch: batch_size=None without a sampler makes each item a batch.
    """
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
    """The loader's settings as the run's params: what `wif-advise` keeps or changes."""
    name = getattr(batches, "wif_name", type(batches).__name__)  # a hooked DataLoader's epoch: its class
    if loader is None:
        return {"loader": name}
    ordered = {key: BY_NAME[key].of(loader) for key in ORDERED}  # what orders may change
    return {
        "loader": name,
        "batch_size": batch_size_of(loader),
        **ordered,
        "drop_last": loader.drop_last,
        "dataset_len": length_of(loader.dataset),
    }


def length_of(sized: Any) -> Optional[int]:
    """`len(sized)`, or None for an IterableDataset without a length."""
    try:
        return len(sized)
    except TypeError:
        return None
