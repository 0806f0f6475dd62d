"""The one table of DataLoader's keyword arguments that wif reads, orders or proves, and how each site names them.

Every site that speaks of one of these arguments reads it here. The watch reads its settings and rebuilds the
loader. The proof checks that an order reached the loader. wif-advise writes its orders and lines to paste;
wif-tune, its trials and a cell's name. A new DataLoader argument is one row here, then the sites that act on it.

Lightning's `train_dataloader()` and accelerate's `prepare` keep the DataLoader's own keywords. Only
transformers' `TrainingArguments` names them otherwise (`trainer_field`).

This module imports nothing but the standard library: wif.watcher.proof reads it while torch is being imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

WORKERS = "_workers"  # `on_iterator` of the start method: the proof reads it off the iterator's worker processes
INIT = "worker_init_fn"  # where an argument that is no DataLoader keyword lives: on the loader's worker_init_fn


@dataclass(frozen=True)
class DataLoaderArg:
    """One DataLoader keyword argument: its default, and its name at each site that reads it."""

    name: str  # DataLoader's keyword, and the key `loader.<name>` of wif's configuration
    default: Any  # DataLoader's default
    needs_workers: bool  # means nothing at num_workers=0: torch refuses it there or ignores it
    since: Tuple[int, int]  # the oldest torch whose DataLoader takes it
    ordered: bool  # wif-advise's orders set it; the rest are the script's own, kept by the rebuilt loader
    label: str = ""  # its mark in a cell's name where it is set away from its default ("{}": its value)
    trainer_field: str = ""  # transformers.TrainingArguments' field; "" where it has none
    # What the proof reads on a live _BaseDataLoaderIter: its attribute, WORKERS for the start method of its
    # worker processes, or "" for the DataLoader's own attribute where the iterator keeps no copy of it.
    on_iterator: str = ""
    as_asked: bool = True  # the iterator keeps it as asked on any machine (pinning needs an accelerator)
    # False: no DataLoader keyword; the loader's worker_init_fn carries it (wif.data.worker_threads), read there
    keyword: bool = True
    paste_as: str = ""  # how it is pasted where not as `name=value` ("{}": its value)

    def of(self, loader: Any) -> Any:
        """The argument as `loader`, a DataLoader, has it: its attribute, or its worker_init_fn's."""
        holder = loader if self.keyword else getattr(loader, INIT, None)
        return getattr(holder, self.name, self.default)

    def pasted(self, value: Any) -> str:
        """The argument as one pastes it into a DataLoader call: `num_workers=4`."""
        return self.paste_as.format(value) if self.paste_as else f"{self.name}={value!r}"

    def trainer_pasted(self, value: Any) -> str:
        """The argument as a TrainingArguments field: `dataloader_num_workers=4`; "" where it has none."""
        return f"{self.trainer_field}={value!r}" if self.trainer_field else ""


ARGS: Tuple[DataLoaderArg, ...] = (
    DataLoaderArg(
        name="num_workers",
        default=0,
        needs_workers=False,
        since=(1, 0),
        ordered=True,
        trainer_field="dataloader_num_workers",
        on_iterator="_num_workers",
    ),
    DataLoaderArg(
        name="prefetch_factor",
        default=None,  # 2 where it has workers (torch fills it in)
        needs_workers=True,
        since=(1, 7),
        ordered=True,
        trainer_field="dataloader_prefetch_factor",
        on_iterator="_prefetch_factor",
    ),
    DataLoaderArg(
        name="pin_memory",
        default=False,
        needs_workers=False,
        since=(1, 0),
        ordered=True,
        trainer_field="dataloader_pin_memory",
        on_iterator="_pin_memory",
        as_asked=False,  # torch pins only where an accelerator is present
    ),
    DataLoaderArg(
        name="persistent_workers",
        default=False,
        needs_workers=True,
        since=(1, 7),
        ordered=True,
        label="persistent",
        trainer_field="dataloader_persistent_workers",
        on_iterator="_persistent_workers",
    ),
    DataLoaderArg(
        name="in_order",
        default=True,
        needs_workers=True,
        since=(2, 6),
        ordered=True,
        label="out_of_order",
        on_iterator="_in_order",
    ),
    DataLoaderArg(
        name="multiprocessing_context",
        default=None,  # the platform's start method
        needs_workers=True,
        since=(1, 2),
        ordered=False,
        label="{}",
        on_iterator=WORKERS,
    ),
    # Each worker's OpenCV, BLAS and OpenMP threads (torch's own are 1 there): a worker_init_fn applies it.
    DataLoaderArg(
        name="worker_threads",
        default=None,  # left as the libraries set them: often one per core in each worker
        needs_workers=True,
        since=(1, 0),
        ordered=True,
        label="wthreads{}",
        on_iterator="_worker_init_fn",  # read off the iterator's worker_init_fn, as `of` reads a DataLoader's
        keyword=False,
        paste_as="worker_init_fn=wif.limit_worker_threads({})",  # one's own chained: (n, your_fn)
    ),
    # Since torch 2.9 the iterator keeps the current accelerator's type, whatever was asked: the DataLoader's own.
    DataLoaderArg(name="pin_memory_device", default="", needs_workers=False, since=(1, 12), ordered=False),
)

BY_NAME: Dict[str, DataLoaderArg] = {arg.name: arg for arg in ARGS}
ORDERED: Tuple[str, ...] = tuple(arg.name for arg in ARGS if arg.ordered)  # what an order may set, in this order
WORKER_ONLY: Tuple[DataLoaderArg, ...] = tuple(arg for arg in ARGS if arg.needs_workers)
