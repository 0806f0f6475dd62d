"""The `worker_threads` option: each DataLoader worker's OpenCV, BLAS and OpenMP threads limited to n.

In each worker torch sets its own threads to 1. OpenCV and BLAS do not, so 12 workers may run 192 threads on
16 cores. The worker's `worker_init_fn` limits them, then calls the loader's own. Standard library only at
import: a spawned worker unpickles it.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Optional


class LimitWorkerThreads:
    """A picklable `worker_init_fn` that limits the worker's threads to `worker_threads`, then calls `inner`."""

    def __init__(self, worker_threads: int, inner: Optional[Callable[[int], Any]] = None) -> None:
        self.worker_threads = int(worker_threads)
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        limit_threads(self.worker_threads)
        if self.inner is not None:
            self.inner(worker_id)

    def __repr__(self) -> str:
        return f"wif.limit_worker_threads({self.worker_threads})"


def limit_worker_threads(n: int, worker_init_fn: Optional[Callable[[int], Any]] = None) -> LimitWorkerThreads:
    """DataLoader's `worker_init_fn=` limiting each worker to `n` threads, then calling `worker_init_fn`."""
    if int(n) < 1:
        raise ValueError(f"worker_threads={n}: a worker needs at least 1 thread")
    return LimitWorkerThreads(n, worker_init_fn)


def with_worker_threads(worker_init_fn: Any, n: Optional[int]) -> Any:
    """`worker_init_fn` limiting to `n` threads; None: the loader's own, unwrapped of any earlier limit."""
    inner = worker_init_fn.inner if isinstance(worker_init_fn, LimitWorkerThreads) else worker_init_fn
    return inner if n is None else LimitWorkerThreads(n, inner)


def limit_threads(n: int) -> None:
    """This process's OpenCV threads, and its BLAS and OpenMP pools, at `n` each: each library where importable."""
    if importlib.util.find_spec("cv2") is not None:
        import cv2

        cv2.setNumThreads(n)
    if importlib.util.find_spec("threadpoolctl") is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n)  # called, not entered: the limit holds for the worker's life


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
