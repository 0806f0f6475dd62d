"""The one table of DataLoader's keyword arguments that wif reads, orders or proves, and how each site names them.

Every site that speaks of one of these arguments reads it here. The watch reads its settings and rebuilds the
loader. The proof checks that an order reached the loader. wif-advise writes its orders and lines to paste;
wif-tune, its trials and a cell's name. A new DataLoader argument is one row here, then the sites that act on it.
One that is no DataLoader keyword brings its `worker_init_fn` here too (`init`, applied by `worker_init`).

Lightning's `train_dataloader()` and accelerate's `prepare` keep the DataLoader's own keywords. Only
transformers' `TrainingArguments` names them otherwise (`trainer_field`).

At import it reads only the standard library: the proof reads it inside `import torch`, a spawned worker unpickles it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

WORKERS = "_workers"  # `on_iterator` of the start method: the proof reads it off the iterator's worker processes


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
    paste_as: str = ""  # how it is pasted where not as `name=value` ("{}": its value)
    # None: a DataLoader keyword. Else the class of the picklable worker_init_fn that applies it in each worker:
    # `init(value, inner)` keeps the value as `.<name>`, and calls `inner`, the loader's own, kept as `.inner`.
    init: Optional[type] = None
    minimum: Optional[int] = None  # the least value the configuration takes, other than its default
    unset: str = ""  # what its default means, as a value below `minimum` is refused: "or null: ..."

    @property
    def keyword(self) -> bool:
        """Whether DataLoader takes it as a keyword; if not, the loader's worker_init_fn carries it (`init`)."""
        return self.init is None

    def of(self, loader: Any) -> Any:
        """The argument as `loader`, a DataLoader, has it: its attribute, or its worker_init_fn's."""
        if self.keyword:
            return getattr(loader, self.name, self.default)
        return self.carried(getattr(loader, "worker_init_fn", None))

    def carried(self, init_fn: Any) -> Any:
        """The argument as a worker_init_fn `init_fn` carries it: on its own wrap (`worker_init`), else its default."""
        while isinstance(init_fn, WRAPS) and not isinstance(init_fn, self.init):  # another argument's wrap
            init_fn = init_fn.inner
        return getattr(init_fn, self.name, self.default)

    def pasted(self, value: Any) -> str:
        """The argument as one pastes it into a DataLoader call: `num_workers=4`."""
        return self.paste_as.format(value) if self.paste_as else f"{self.name}={value!r}"

    def trainer_pasted(self, value: Any) -> str:
        """The argument as a TrainingArguments field: `dataloader_num_workers=4`; "" where it has none."""
        return f"{self.trainer_field}={value!r}" if self.trainer_field else ""


class LimitWorkerThreads:
    """A picklable `worker_init_fn` that limits the worker's threads to `worker_threads`, then calls `inner`."""

    def __init__(self, worker_threads: int, inner: Optional[Callable[[int], Any]] = None) -> None:
        self.worker_threads = int(worker_threads)
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        if importlib.util.find_spec("cv2") is not None:  # each library where importable
            import cv2

            cv2.setNumThreads(self.worker_threads)
        if importlib.util.find_spec("threadpoolctl") is not None:  # BLAS and OpenMP pools
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=self.worker_threads)  # called, not entered: the limit holds for the worker's life
        if self.inner is not None:
            self.inner(worker_id)

    def __repr__(self) -> str:
        return f"wif.limit_worker_threads({self.worker_threads})"


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
        minimum=1,
        unset="or null for PyTorch's default",
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
        paste_as="worker_init_fn=wif.limit_worker_threads({})",  # one's own chained: (n, your_fn)
        init=LimitWorkerThreads,
        minimum=1,
        unset="or null: as the libraries set them",
    ),
    # Since torch 2.9 the iterator keeps the current accelerator's type, whatever was asked: the DataLoader's own.
    DataLoaderArg(name="pin_memory_device", default="", needs_workers=False, since=(1, 12), ordered=False),
)

BY_NAME: Dict[str, DataLoaderArg] = {arg.name: arg for arg in ARGS}
ORDERED: Tuple[str, ...] = tuple(arg.name for arg in ARGS if arg.ordered)  # what an order may set, in this order
WORKER_ONLY: Tuple[DataLoaderArg, ...] = tuple(arg for arg in ARGS if arg.needs_workers)
WRAPS: Tuple[type, ...] = tuple(arg.init for arg in ARGS if arg.init is not None)  # the worker_init_fn wif makes


def worker_init(settings: Mapping[str, Any], inner: Any) -> Any:
    """`inner`, a worker_init_fn, rid of wif's wraps, then wrapped by each argument off its default in `settings`."""
    while isinstance(inner, WRAPS):
        inner = inner.inner
    for arg in ARGS:
        value = settings.get(arg.name, arg.default)
        if arg.init is not None and value != arg.default:
            inner = arg.init(value, inner)
    return inner


def limit_worker_threads(n: int, worker_init_fn: Optional[Callable[[int], Any]] = None) -> LimitWorkerThreads:
    """DataLoader's `worker_init_fn=` limiting each worker to `n` threads, then calling `worker_init_fn`."""
    if int(n) < 1:
        raise ValueError(f"worker_threads={n}: a worker needs at least 1 thread")
    return LimitWorkerThreads(n, worker_init_fn)


def default_threads() -> int:
    """The most threads one of OpenCV, BLAS or OpenMP starts in a process left as is: each worker's, read here."""
    counts = [1]
    if importlib.util.find_spec("threadpoolctl") is not None and importlib.util.find_spec("numpy") is not None:
        import numpy  # noqa: F401  (its BLAS loaded, so that threadpoolctl sees it)
        from threadpoolctl import threadpool_info

        counts += [int(pool.get("num_threads") or 1) for pool in threadpool_info()]
    if importlib.util.find_spec("cv2") is not None:
        import cv2

        counts.append(int(cv2.getNumThreads()))
    return max(counts)


PUBLIC: Dict[str, Any] = {"limit_worker_threads": limit_worker_threads}  # `wif.<name>`, as lines to paste call it
