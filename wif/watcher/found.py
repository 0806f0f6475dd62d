"""The script's DataLoader: found inside whatever a loop iterates, its settings read, and rebuilt with others.

`wif.watch` gets a DataLoader, a wrapper holding one, or a generator over one, often a new one each epoch.
The wrappers of timm and tqdm hold it as `.loader` and `.iterable`. The epochs of one training loader are one
watch, anchored at the DataLoader's dataset. An iterable with no DataLoader inside is its own anchor; one made
anew each epoch is kept by its loop (wif.watcher.watch._key).

`rebuild` makes the DataLoader again with a candidate's worker settings (wif.dataloader_args.ORDERED). What
decides its batches stays: dataset, samplers, collate_fn, worker_init_fn, generator, start method, pin device.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, NamedTuple, Optional

import torch
from torch.utils.data import DataLoader, IterableDataset

from wif.dataloader_args import ARGS, BY_NAME, ORDERED, worker_init

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
    """Whether `value` is a DataLoader by its type: accelerate's DataLoaderShard only says it is one."""
    return issubclass(type(value), DataLoader)


def find_dataloader(batches: Any, depth: int = 3) -> Optional[Found]:
    """The DataLoader inside `batches` and where it is held (usual attributes, then all, then a generator's locals)."""
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


def rebuild(loader: DataLoader, settings: Dict[str, Any]) -> DataLoader:
    """`loader` again with other worker settings, what decides its batches kept, its subclass too."""
    ordered = ordered_args(loader, settings)
    init = worker_init(ordered, loader.worker_init_fn)
    ordered = {name: value for name, value in ordered.items() if BY_NAME[name].keyword}  # the rest are in init
    if type(loader) is not DataLoader:
        return _adjusted(loader, ordered, init)
    kwargs: Dict[str, Any] = dict(
        collate_fn=loader.collate_fn,
        timeout=loader.timeout,
        worker_init_fn=init,
        generator=loader.generator,
        pin_memory_device=loader.pin_memory_device,
        **ordered,
    )
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is not None:  # the user's own batch sampler
        kwargs.update(batch_sampler=loader.batch_sampler)
    else:
        kwargs.update(batch_size=loader.batch_size, sampler=loader.sampler, drop_last=loader.drop_last)
    if ordered["num_workers"] > 0:
        kwargs.update(multiprocessing_context=loader.multiprocessing_context)
    return DataLoader(loader.dataset, **kwargs)


def ordered_args(loader: DataLoader, settings: Dict[str, Any]) -> Dict[str, Any]:
    """Each argument orders may set, as `settings` asks, else as `loader` has it, where it applies."""
    workers = int(settings.get("num_workers", loader.num_workers))
    out: Dict[str, Any] = {}
    for arg in ARGS:
        held = hasattr(loader, arg.name) or not arg.keyword  # one this torch lacks is left out
        if not arg.ordered or not held or (arg.needs_workers and workers == 0):
            continue
        asked = settings.get(arg.name)
        value = arg.of(loader) if asked is None else asked
        out[arg.name] = bool(value) if isinstance(arg.default, bool) else value
    out["num_workers"] = workers
    if workers > 0:
        out["prefetch_factor"] = out["prefetch_factor"] or 2  # DataLoader's own default with workers
    return out


def _adjusted(loader: DataLoader, ordered: Dict[str, Any], init: Any) -> DataLoader:
    """A copy of a DataLoader subclass with other worker settings.

    DataLoader reads them when an epoch's iterator is made. `persistent_workers` is guarded after __init__, so
    each is set in the instance's dict; one left out is set to DataLoader's default. `init`: its worker_init_fn.
    """
    new = copy.copy(loader)
    state = new.__dict__
    state["_iterator"] = None  # the copy starts its own workers
    state["worker_init_fn"] = init
    for arg in ARGS:
        if arg.ordered and arg.keyword and hasattr(loader, arg.name):
            state[arg.name] = ordered.get(arg.name, arg.default)
    return new
