"""A run never outlives its sweep, and a run record names the process that owns it.

A supervisor killed with SIGKILL can stop nothing. So each child asks the kernel through
`prctl(PR_SET_PDEATHSIG)` to end it with its parent. The MLflow run it owned stays RUNNING; its owner's tags
(`owner_tags`) let a later sweep close it as stale. DataLoader workers import this: no torch, no MLflow.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
import traceback
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import psutil

from wif.measure import names

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
START_TIME_TOLERANCE_S = 1.0  # process start times read twice may differ by rounding, never by this much


def process_age_s() -> float:
    """Seconds since this process started; at most a clock tick long, as the kernel floors the start to a tick."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, since boot
        now = time.clock_gettime(time.CLOCK_BOOTTIME)  # to the ns: /proc/uptime's 10 ms would add a second tick
        return max(now - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        return max(time.time() - psutil.Process().create_time(), 0.0)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as ever; main thread only.

    A run record interrupted before its id is known would stay RUNNING. Python's handlers are swapped, not the
    mask: the kernel would hand the signal to another thread, the sampler's.
    """
    caught: list = []
    old = {
        sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


def die_with_parent(parent_pid: Optional[int] = None) -> None:
    """Have the kernel SIGKILL this process when the thread that forked it ends (Linux; a no-op elsewhere).

    So wif forks only from the main thread. With `parent_pid`, a parent already dead ends this process at once.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own clean-up is all there is
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def how_it_ended(exitcode: Optional[int]) -> str:
    """How a process that said nothing ended, from its exit code: a signal, or native code."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (by hand, a scheduler, or the kernel when the host ran out of memory)"
    return f"ended with exit code {exitcode} without a Python exception (an exit or a crash in native code)"


def said_if_raised(target: Callable[..., Any], conn: Any, *args: Any) -> None:
    """Run `target(*args)`, and send on `conn` any Python exception that escapes it as ("error", {...}), then exit 1."""
    try:
        target(*args)
    except Exception as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt leave as they are
        conn.send(("error", {"type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc()}))
        raise SystemExit(1) from None


def dataloader_worker_init(worker_id: int) -> None:
    """DataLoader's picklable `worker_init_fn`: a worker dies with its run, and an interrupt prints no traceback."""
    die_with_parent()
    sys.excepthook = _quiet_fd_sharing


def _quiet_fd_sharing(kind: type, err: BaseException, tb: Optional[TracebackType]) -> None:
    """No traceback where the run left mid-handshake with this worker's fd-sharing thread (resource_sharer)."""
    if issubclass(kind, (ConnectionError, EOFError)) and tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith("resource_sharer.py"):
            return
    sys.__excepthook__(kind, err, tb)


def run_dying(target: Callable[..., Any], parent_pid: Optional[int], *args: Any) -> None:
    """A worker process's target behind `die_with_parent`, for pools without a `worker_init_fn` (torchdata.nodes)."""
    die_with_parent(parent_pid)
    target(*args)


class DyingContext:
    """A multiprocessing context whose processes die with the process that started them.

    A forkserver's workers are its children: they die with it, and it ends with its client.
    """

    def __init__(self, context: Any) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def Process(self, *, target: Callable[..., Any], args: tuple = (), **kwargs: Any) -> Any:  # noqa: N802
        parent = None if self._context.get_start_method() == "forkserver" else os.getpid()
        return self._context.Process(target=run_dying, args=(target, parent, *args), **kwargs)


def owner_tags() -> Dict[str, str]:
    """Tags naming the process that owns a run's MLflow record (the supervisor): host, pid, start time."""
    me = psutil.Process()
    return {
        names.TAG_HOST: socket.gethostname(),
        names.TAG_PID: str(me.pid),
        names.TAG_PID_STARTED: f"{me.create_time():.3f}",
    }


def owner_gone(tags: Mapping[str, str]) -> bool:
    """True when a RUNNING run's owner ran on this host and is no longer alive; other hosts' runs are never judged."""
    mine = tags.get(names.TAG_HOST) == socket.gethostname()
    if not mine or names.TAG_PID not in tags or names.TAG_PID_STARTED not in tags:
        return False
    try:
        owner = psutil.Process(int(tags[names.TAG_PID]))
        if owner.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by its parent
            return True
        started = owner.create_time()
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, ValueError):
        return False
    return abs(started - float(tags[names.TAG_PID_STARTED])) > START_TIME_TOLERANCE_S


def stop_tree(procs: List[psutil.Process], grace_s: float = 5.0) -> None:
    """Terminate a run and every worker it started, even those a crashed run left behind.

    The run goes first, to shut its DataLoader down; what is left past the grace is killed. A recycled PID is never hit.
    """
    if procs and procs[0].is_running():
        with contextlib.suppress(psutil.Error):
            procs[0].terminate()
            procs[0].wait(grace_s)
    live = {p.pid: p for p in procs if p.is_running()}
    for p in list(live.values()):
        with contextlib.suppress(psutil.Error):
            live.update({c.pid: c for c in p.children(recursive=True)})  # started since the last sample
    procs = list(live.values())
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
