"""The process that forks runs, made ready once: a sweep's jobs, wif-tune's trials, wif-advise's runs.

It is made warm and serial (`serial_parent`), and its objects are frozen while a run lives (`freeze_for_run`).
`interrupt` ends a supervisor, run or rank on SIGTERM as Ctrl-C does. `said_error` is what a run or a rank says
when an error ends it.
"""

from __future__ import annotations

import functools
import gc
import signal
import traceback
from typing import Any, Dict

import torch
from torch import nn

from wif.config import ConfigError, UserCodeError
from wif.config.exits import describe


def interrupt(signum: int, frame: Any) -> None:
    """End a run on SIGTERM (a scheduler, `kill`, the launcher) the way Ctrl-C does: marked KILLED, workers stopped."""
    raise KeyboardInterrupt


def said_error(err: BaseException, workers: int) -> Dict[str, Any]:
    """The error message a run or a rank sends its supervisor; a second signal no longer cuts it short."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    name, message = describe(err, workers)  # a connection lost with workers running: one of them died
    return {
        "type": name,
        "message": message,
        "traceback": traceback.format_exc(),
        "bad_setting": isinstance(err, ConfigError),
        "user_code": isinstance(err, UserCodeError),
    }


def preload() -> None:
    """Ready the supervising process to fork runs: warm (one-time imports paid once) and serial (below)."""
    _warm_imports()
    serial_parent()


@functools.lru_cache(maxsize=None)
def _warm_imports() -> None:
    """Building the first optimizer imports torch._dynamo (about 2 s here). Nothing here touches CUDA."""
    import prefetch_generator  # noqa: F401
    import torchvision.models  # noqa: F401

    torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)


_PARENT_THREADS: list = []  # torch's intra-op threads as they were before serial_parent()


def serial_parent() -> None:
    """Keep a process that forks runs off torch's CPU thread pool.

    GNU OpenMP, torch's intra-op threads, is not fork-safe. A child forked after its parent ran a parallel op
    waits forever for the parent's pool threads. The advice hung so after drawing its subset on threads. On one
    thread no pool starts. Each forked run, and a borrowed process such as a notebook, gets the count back after.
    """
    if not _PARENT_THREADS:
        _PARENT_THREADS.append(torch.get_num_threads())
        torch.set_num_threads(1)


def forked_run_threads() -> None:
    """In a run forked from a serial parent, before its first op: torch's intra-op threads as they were."""
    if _PARENT_THREADS:
        torch.set_num_threads(_PARENT_THREADS[0])


def parent_threads_back() -> None:
    """Give a process wif borrowed its threads back once its runs are done: `wif.advise()` in a notebook."""
    if _PARENT_THREADS:
        torch.set_num_threads(_PARENT_THREADS.pop())


# NOTE [ The supervisor's objects frozen while a run lives ]
# A forked run shares the supervisor's pages until either writes to them. A garbage collection writes into the
# header of every object it traces, so one in the supervisor, while it logged the run's epochs, made 130 MB of
# shared pages the run's own: the run's USS peak read 300 MB where it read 150 when no collection fell within
# it. gc.freeze() keeps the objects there at the fork out of both processes' collections until the run ends.


def freeze_for_run() -> None:
    """Before forking a run: the supervisor's objects out of the collector's reach. See the NOTE above."""
    gc.freeze()


def thaw_after_run() -> None:
    """Once the run's process has ended: the supervisor's objects collected again, garbage among them freed."""
    gc.unfreeze()
