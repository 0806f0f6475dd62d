"""A DataLoader rebuilt with a candidate's worker settings, as wif-advise's orders ask (wif.watcher.orders).

`num_workers`, `pin_memory`, `prefetch_factor`, `persistent_workers` and `in_order` change; the dataset,
sampler or batch sampler, collate_fn, worker_init_fn and generator stay.
"""

from __future__ import annotations

import copy
from typing import Any, Dict

from torch.utils.data import DataLoader, IterableDataset

from wif.data.loaders import TAKES_IN_ORDER


def rebuild(loader: DataLoader, settings: Dict[str, Any]) -> DataLoader:
    """`loader` again with other worker settings; what decides its batches kept as it was.

    A framework's own DataLoader subclass stays what it is: a copy of it, its worker settings changed.
    accelerate's DataLoaderShard, for one, places each batch on its device.
    """
    workers = int(settings.get("num_workers", loader.num_workers))
    if type(loader) is not DataLoader:
        return _adjusted(loader, settings, workers)
    kwargs: Dict[str, Any] = dict(
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=bool(settings.get("pin_memory", loader.pin_memory)),
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        pin_memory_device=loader.pin_memory_device,
    )
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is not None:  # the user's own batch sampler
        kwargs.update(batch_sampler=loader.batch_sampler)
    else:
        kwargs.update(batch_size=loader.batch_size, sampler=loader.sampler, drop_last=loader.drop_last)
    if workers > 0:
        kwargs.update(
            prefetch_factor=settings.get("prefetch_factor") or loader.prefetch_factor or 2,
            persistent_workers=bool(settings.get("persistent_workers", loader.persistent_workers)),
            multiprocessing_context=loader.multiprocessing_context,
        )
        if TAKES_IN_ORDER:
            kwargs["in_order"] = bool(settings.get("in_order", getattr(loader, "in_order", True)))
    return DataLoader(loader.dataset, **kwargs)


def _adjusted(loader: DataLoader, settings: Dict[str, Any], workers: int) -> DataLoader:
    """A copy of a DataLoader subclass with other worker settings.

    DataLoader reads them when an epoch's iterator is made. `persistent_workers` is guarded after __init__, so
    it is set in the instance's dict.
    """
    new = copy.copy(loader)
    state = new.__dict__
    state["_iterator"] = None  # the copy starts its own workers
    state["num_workers"] = workers
    state["pin_memory"] = bool(settings.get("pin_memory", loader.pin_memory))
    state["prefetch_factor"] = (settings.get("prefetch_factor") or loader.prefetch_factor or 2) if workers else None
    state["persistent_workers"] = workers > 0 and bool(settings.get("persistent_workers", loader.persistent_workers))
    if TAKES_IN_ORDER:
        state["in_order"] = bool(settings.get("in_order", getattr(loader, "in_order", True)))
    return new
