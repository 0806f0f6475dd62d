"""Which loader trains: the claim on it, its proof by a step, and what another loader's epoch does to it.

Under the hook every DataLoader epoch comes to `wif.watcher.watch.hooked`, which asks here. See NOTE [ The
watch's states ]. A step is a backward pass or an optimizer step, counted only while a claim waits for one.
The count is global: `torch.autograd.backward`, which `Tensor.backward` calls, is wrapped, and torch's
global optimizer step hook counts too. A proven training pays nothing per step.
"""

from __future__ import annotations

import enum
import functools
import os
import weakref
from typing import Any, Callable, Iterable, List, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from wif.watcher import origin, served
from wif.watcher.found import settings_of
from wif.watcher.orders import Orders
from wif.watcher.record import device

# NOTE [ The watch's states ]
# A Session's `state` moves once, at its loader's first epoch (`settle`), and then stays:
#   UNDECIDED -> PASSED    another loader is claimed, or this one is not the training loader: it runs as it
#                          is, for good. Only a session that claims, under orders or the hook, can pass.
#   UNDECIDED -> PROBING   wif-advise's probe: the first batches are timed, nothing is recorded, and the script
#                          ends (SystemExit) after them or at the next epoch's start.
#   UNDECIDED -> WATCHED   its Record opened: every epoch timed, said and logged.
# A claim is made once per script: CLAIMED holds the one training loader's session.
# Under the hook the claim is provisional (`proven` false) until a step: a backward pass or an optimizer step
# in its epoch (`steps_seen`). Its windows' figures are held (`pending`) until then. The HF Trainer's
# evaluation iterates with gradients on and takes no step. Another loader that begins an epoch after an
# unproven claim's epoch ended drops that claim (wif.watcher.claim): its held figures, its record and its
# orders go, and the new loader claims. The claim stands without a step where its own loader begins its next
# epoch, or the script ends: a loop with no backward keeps the first loader with gradients on.
# A WATCHED session under orders ends the script (SystemExit) at the epoch where the orders are done.
# Record's failure to open leaves the session UNDECIDED but claimed; its next epoch tries again.
# Beside the state, a few flags:
#   ranked            set at the claim: a distributed script's training loader, its ranks' figures gathered.
#   starting          true from an epoch's start to its first batch: a DataLoader epoch started then is this
#                     epoch's own (`hooked` lets it run as it is).
#   handed, expected  the batches handed out in this epoch, and its length where it has one.
#   epoch_index       the script's epoch under way; each is timed in windows (NOTE [ Windows ]).
#   current           a hooked epoch as the framework holds it; `taken` once every batch was handed out.
#   iterated, open    the hooked loader whose epoch is current (held weakly), and whether that epoch runs.
#   warned            an epoch that could not be recorded was said; later failures are quiet.


class State(enum.Enum):
    """Where a Session stands. See NOTE [ The watch's states ]."""

    UNDECIDED = "undecided"
    PASSED = "passed"
    PROBING = "probing"
    WATCHED = "watched"


CLAIMED: List[Any] = []  # under orders or the hook: the one training loader's session


DROPPED: "weakref.WeakSet[Any]" = weakref.WeakSet()  # loaders whose claim was dropped: they claim no more


def weak(loader: Any) -> Callable[[], Optional[Any]]:
    """`loader` held weakly, or strongly where it cannot be."""
    try:
        return weakref.ref(loader)
    except TypeError:
        return lambda: loader


def settle(session: Any, batches: Iterable[Any]) -> bool:
    """At an epoch's start: the session's state settled at its first epoch; whether this epoch is watched.

    See NOTE [ The watch's states ].
    """
    if session.state is not State.UNDECIDED:
        return session.state is not State.PASSED
    if session.claims and session not in CLAIMED:
        if CLAIMED or not would_claim(session.loader):
            session.state = State.PASSED
            return False
        CLAIMED.append(session)
        session.proven = session.proven or bool(os.environ.get(origin.NAMED))  # named: the script's own word
        if not session.proven:
            arm()
    if session.ordered:
        session.orders = session.orders or Orders.from_env()
        if session.orders.mode == "probe":  # wif-advise asks what the training loader is, and nothing more
            loader = session.loader
            origin_ = origin.of(loader) if loader is not None else {}
            where = {"step_device": device().type}  # CUDA started by the first epoch: the step runs there
            session.orders.probe({**settings_of(batches, loader), **origin_, **where}, loader is not None)
            session.state = State.PROBING
            return True
    session.open_record()
    return True


def begun_by(claimed: Any, loader: Any) -> str:
    """What an epoch of `loader`, begun now, is to the claimed session: "inner", "again" or "another".

    An "inner" epoch is the DataLoader epoch its own epoch begins, a holder's or a rebuilt one. An "again"
    epoch is its loader's next, or a new DataLoader's over its dataset where the last one is gone. Any other
    loader's is "another".
    """
    if claimed.starting and loader.dataset is claimed.anchor:
        return "inner"
    if claimed.iterated is None:  # the loader handed to wif.watch: the script's line says what is watched
        return "another"
    last = claimed.iterated()
    return "again" if last is loader or (last is None and loader.dataset is claimed.anchor) else "another"


def would_claim(loader: Any) -> bool:
    """Whether an epoch of `loader` begun now may claim: named, or with gradients on; never once dropped."""
    if loader in DROPPED:
        return False
    named = os.environ.get(origin.NAMED)
    if named:
        return loader is not None and origin.is_named(named, loader)
    return torch.is_grad_enabled()


def drop(session: Any) -> None:
    """An unproven claim whose epoch ended with no step: not the training loader. Its figures, record and
    orders go; it runs as it is from now on."""
    CLAIMED.remove(session)
    session.state, session.pending = State.PASSED, []
    last = session.iterated() if session.iterated is not None else None
    if last is not None:
        DROPPED.add(last)
    if session.record is not None:  # nothing was logged: no run was opened
        session.record.finished = True
        session.record.sampler.stop()
    if session.orders is not None:
        served.end_workers(session.orders.rebuilt)  # a candidate's workers, if it took the order


def stand(session: Any) -> None:
    """At the script's end: an unproven claim nothing displaced stands, its held windows said and logged."""
    if session in CLAIMED and session.pending:
        session.publish()


_seen = [0]  # backward passes and optimizer steps while armed
_undo: List[Callable[[], None]] = []


def steps_seen() -> int:
    """The steps seen so far while armed."""
    return _seen[0]


def _stepped(*_: Any) -> None:
    _seen[0] += 1


def arm() -> None:
    """The steps counted from now on; once."""
    if _undo:
        return
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        _seen[0] += 1
        return original(*args, **kwargs)

    torch.autograd.backward = backward
    handle = register_optimizer_step_post_hook(_stepped)

    def undo() -> None:
        handle.remove()
        if torch.autograd.backward is backward:  # another wrapper over ours stays, and ours counts on unseen
            torch.autograd.backward = original

    _undo.append(undo)


def disarm() -> None:
    """No more counting: the claim is settled."""
    while _undo:
        _undo.pop()()
