"""`wif.watch(loader)`: the one line a user adds to their own loop, `for batch in wif.watch(train_loader):`.

Each pass is an epoch, timed by the loop's own clock (`wif.run.loop.TimedFeed`). The wait in `next()` is the
loader's part; the time between batches is the user's step. CUDA is synchronized at an epoch's start and end
only. The process tree's memory comes from the study's sampler (`wif.watcher.record`). Each epoch goes to
MLflow, tagged `wif.kind=watch`, and one line says whether the step waited for data. Any iterable of batches
is watched; a DataLoader inside it is found for its settings. Under wif-advise's orders (`wif.watcher.orders`)
the same line runs the advice's measurements. One loader's watch is a `wif.watcher.session.Session`.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

from torch.utils.data import DataLoader

from wif.watcher.claim import CLAIMED, State, begun_by, drop, weak, would_claim
from wif.watcher.found import anchor_of, find_dataloader
from wif.watcher.options import WatchOptions, warn
from wif.watcher.orders import ENV, Orders
from wif.watcher.record import Record
from wif.watcher.session import Session

__all__ = ["MODES", "Watched", "find_dataloader", "hooked", "warn", "watch"]

_sessions: Dict[Any, Session] = {}  # by its anchor's id(), or by its loop: NOTE [ One loop, one session ]
MODES = ("1", "0", "print", "quiet")  # WIF_WATCH


class Watched:
    """What `wif.watch` returns: iterate it once an epoch; everything else is the wrapped loader's."""

    def __init__(self, batches: Iterable[Any], session: Session) -> None:
        self.batches, self.session = batches, session

    def __iter__(self) -> Iterator[Any]:
        return self.session.epoch(self.batches)

    def __len__(self) -> int:
        session = self.session
        undecided = session.ordered and session.state is not State.PASSED
        orders = session.orders or (Orders.from_env() if undecided else None)
        if orders is not None:  # under orders, or before the first epoch decides them: capped
            return orders.length(self.batches)
        return len(self.batches)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.batches, name)


def watch(
    batches: Iterable[Any],
    *,
    experiment: Optional[str] = None,
    run_name: Optional[str] = None,
    log: bool = True,
    quiet: bool = False,
) -> Watched:
    """`for batch in wif.watch(train_loader):` times each pass as an epoch and logs it.

    Call it once, or once an epoch on the same loader: the epochs go on in one MLflow run. The environment
    decides without touching the script: WIF_WATCH=0 turns it off. WIF_WATCH=print says each epoch's line
    and logs nothing, with no store opened or made. WIF_WATCH=quiet logs and says nothing.

    Args:
        batches: the loader, or any iterable of batches.
        experiment: the store's experiment; by default MLFLOW_EXPERIMENT_NAME or the study's.
        run_name: the MLflow run's name.
        log: False logs nothing to MLflow.
        quiet: True says no line per epoch.
    """
    mode = _mode()
    if mode is None:
        return batches  # type: ignore[return-value]
    ordered = bool(os.environ.get(ENV))
    options = WatchOptions(
        experiment=experiment,
        run_name=run_name,
        log=log and mode != "print",
        quiet=quiet or mode == "quiet",
        ordered=ordered,
    )
    try:
        caller = sys._getframe(1)  # the loop's line: a generator made anew there each epoch is the same loop
        session = _session(batches, options, site=(caller.f_code.co_filename, caller.f_lineno))
    except Exception as err:  # noqa: BLE001 - without orders, the watch's own failure is a warning line
        if ordered:
            raise
        warn(f"cannot watch this {type(batches).__name__} ({type(err).__name__}: {err}); it runs unwatched")
        return batches  # type: ignore[return-value]
    return Watched(batches, session)


def _mode() -> Optional[str]:
    """WIF_WATCH's mode, None for off; an unknown value is said and taken as 1."""
    mode = os.environ.get("WIF_WATCH", "1")
    if mode == "0":
        return None
    if mode not in MODES:
        warn(f"WIF_WATCH={mode!r} is not one of {', '.join(MODES)}: watching as WIF_WATCH=1")
        os.environ["WIF_WATCH"] = mode = "1"  # said once: the next call reads 1
    return mode


def hooked(loader: DataLoader, own: Iterable[Any]) -> Optional[Iterator[Any]]:
    """An epoch of `loader` started by whatever iterates it (wif.watcher.hook), as the watch has it.

    None where it runs as it is: another loader, an evaluation, or one inside a watched epoch.
    See NOTE [ The watch's states ] in wif.watcher.claim.
    """
    mode = _mode()
    if mode is None:
        return None
    kept = _sessions.get(id(loader.dataset))
    if kept is not None and kept.anchor is loader.dataset and (kept.starting or not kept.options.claims):
        return None  # the watched epoch's own DataLoader, or one the script's own wif.watch line watches
    if CLAIMED:
        claimed = CLAIMED[0]
        seen = begun_by(claimed, loader)
        if seen == "inner":
            return None
        if seen == "again":
            return _again(claimed, loader, own)
        if claimed.taken():  # Lightning's fetcher takes its batches by count: the training epoch is over
            claimed.current.close()
        if claimed.proven or claimed.open or not would_claim(loader):
            return None  # another loader, such as an evaluation's: as it is, and the training epoch goes on
        drop(claimed)  # its epoch ended with no step: an evaluation with gradients on, as the HF Trainer's
    elif not would_claim(loader):
        return None
    options = WatchOptions(log=mode != "print", quiet=mode == "quiet", ordered=bool(os.environ.get(ENV)), claims=True)
    session = _session(own, options, fresh=True)
    session.iterated = weak(loader)
    session.current = session.epoch(own)
    return session.current


def _again(claimed: Session, loader: DataLoader, own: Iterable[Any]) -> Optional[Iterator[Any]]:
    """The claimed loader's next epoch; None for a pass with gradients off over it, an evaluation."""
    if not would_claim(loader):  # a pass with gradients off over it, not named: an evaluation
        return None
    if claimed.current is not None:
        claimed.current.close()  # the last one ended, though the framework may still hold it
    if not claimed.proven:
        claimed.publish()  # its own loader again, nothing between: the claim stands without a step
    claimed.iterated = weak(loader)
    claimed.current = claimed.epoch(own)
    return claimed.current


def _session(
    batches: Iterable[Any], options: WatchOptions, fresh: bool = False, site: Optional[Tuple[str, int]] = None
) -> Session:
    """The watch of this loader: the one kept by its anchor or its loop, or a new one.

    Args:
        batches: this epoch's iterable.
        options: how a new session watches.
        fresh: a new session where the one kept passed.
        site: where `wif.watch` was called, the file and line.
    """
    anchor = anchor_of(batches)
    key = _key(batches, anchor, site)
    session = _sessions.get(key)
    kept = session is not None and (session.anchor is anchor or not isinstance(key, int))
    if kept and not (fresh and session.state is State.PASSED):
        return session
    session = _sessions[key] = Session(batches, options)
    if isinstance(key, int):
        try:  # the loop is gone with its anchor; one that cannot be held weakly lives to the script's end
            weakref.finalize(anchor, _gone, key, session).atexit = False
        except TypeError:
            pass
    return session


# NOTE [ One loop, one session ]
# A session is one loop's watch: one MLflow run, its windows, and its sampler thread. `_sessions` keeps it by
# what outlives the loop's epochs (`_key`). That is the dataset of the DataLoader inside what is iterated.
# Without a DataLoader, it is the `wif.watch` line, the iterable's type and its generator's code. So a new
# DataLoader or wrapper each epoch over one dataset is one session, and so is a generator made anew each epoch.
# The session holds the user's objects weakly: its dataset, its DataLoader, the last one hooked.
# The dataset's collection means its loop is gone. Then `_gone` takes the session out of `_sessions` and ends
# its run as the script's end would, on a thread of its own. The sampler stops; the held windows, the summary
# and the run's status go to MLflow. A new session may take the key later: it is another loop's.
# Some sessions end with the script: one kept by its line, whose iterable lives one epoch only; one whose
# dataset cannot be held weakly; one under wif-advise's orders; one whose claim waits for a step.
# A dataset made anew each epoch is a new loop each epoch: a run each, each ended as its dataset goes.


def _key(batches: Any, anchor: Any, site: Optional[Tuple[str, int]]) -> Any:
    """What keeps a session: the id() of its DataLoader's dataset, else its loop. See NOTE [ One loop, one session ]."""
    if anchor is not batches or site is None:
        return id(anchor)
    return (*site, type(batches).__qualname__, getattr(getattr(batches, "gi_code", None), "co_qualname", ""))


def _gone(key: int, session: Session) -> None:
    """A collected anchor's session leaves `_sessions` and its run ends on a thread; a busy one ends with the script."""
    if _sessions.get(key) is session:
        del _sessions[key]
    record = session.record
    if record is None or record.finished or session.ordered or session.open or not session.proven:
        return
    try:
        threading.Thread(target=_finish, args=(record,), name="wif-end").start()
    except Exception as err:  # noqa: BLE001 - no thread at all: the script's end finishes the run
        warn(f"a watched loop ended, and its run ends with the script ({type(err).__name__}: {err})")


def _finish(record: Record) -> None:
    """`record` finished as at the script's end: its sampler stopped, its figures sent, its run closed."""
    try:
        record.finish()
    except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
        warn(f"a watched loop's run could not be ended ({type(err).__name__}: {err})")
