"""A DataLoader rebuilt with a candidate's worker settings, as wif-advise's orders ask (wif.watcher.orders).

The arguments orders may set change (wif.dataloader_args.ORDERED); the dataset, sampler or batch sampler,
collate_fn, worker_init_fn, generator, start method and pin device stay. One that is no DataLoader keyword,
worker_threads, wraps the loader's own worker_init_fn (wif.data.worker_threads).
"""

from __future__ import annotations

import copy
from typing import Any, Dict

from torch.utils.data import DataLoader, IterableDataset

from wif.data.worker_threads import with_worker_threads
from wif.dataloader_args import ARGS


def rebuild(loader: DataLoader, settings: Dict[str, Any]) -> DataLoader:
    """`loader` again with other worker settings; what decides its batches kept as it was.

    A framework's own DataLoader subclass stays what it is: a copy of it, its worker settings changed.
    accelerate's DataLoaderShard, for one, places each batch on its device.
    """
    ordered = ordered_args(loader, settings)
    init = with_worker_threads(loader.worker_init_fn, ordered.pop("worker_threads", None))
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
    """Each argument orders may set: as `settings` asks, else as `loader` has it.

    Without workers, those that need them are left out; so is one this torch's DataLoader lacks.
    """
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
