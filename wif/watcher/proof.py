"""Whether a candidate's settings reached the DataLoader that an epoch under orders really iterates.

An order rebuilds the script's DataLoader and puts the copy where the watched object holds it
(wif.watcher.orders). A loop may iterate another reference to the old one, or a wrapper may make its own.
Then the trial would time the script's own setting under the candidate's name. So each epoch under loader
orders checks, at its first batch, the iterator of the DataLoader over its dataset that began in it
(wif.watcher.hook notes each in STARTED). Its workers, prefetch and pinning must be those ordered, and its
workers alive. Where they are not, the script ends with one line that starts with UNREACHED, and nothing of it
is recorded.

This module imports nothing but the standard library: the hook imports it while torch is being imported.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Deque, Dict, Iterable, List, Optional, Tuple

UNREACHED = "the order did not reach the loader"
STARTED: Deque[Tuple[Any, Any]] = collections.deque(maxlen=8)  # the DataLoader epochs begun last, held weakly
_HOOKED: List[bool] = []  # the hook is in place: STARTED is kept


def note_hooked() -> None:
    """The hook is in place: every DataLoader epoch begun is noted from now on."""
    _HOOKED[:] = [True]


def note(loader: Any, epoch: Any) -> None:
    """`loader` began `epoch`, its iterator; both held weakly, so that nothing outlives the loop's own use."""
    try:
        STARTED.append((weakref.ref(loader), weakref.ref(epoch)))
    except TypeError:  # an object that cannot be held weakly goes unnoted
        pass


def started() -> Optional[Iterable[Tuple[Any, Any]]]:
    """The epochs begun since STARTED was last cleared; None where the hook is not in place to note them."""
    return STARTED if _HOOKED else None


class Unreached(SystemExit):
    """A measurement whose order did not reach the loader it iterates: the script ends, saying so."""

    def __init__(self, why: str) -> None:
        super().__init__(f"wif.watch: {UNREACHED}: {why}")


def promised(found: Any, rebuilt: Any) -> Dict[str, Any]:
    """What the iterated DataLoader must show once `rebuilt` replaces `found`.

    Its workers always, their prefetch where it has workers, and pinning where the order changes it.
    """
    out: Dict[str, Any] = {"num_workers": rebuilt.num_workers}
    if rebuilt.num_workers > 0:
        out["prefetch_factor"] = rebuilt.prefetch_factor
    if bool(rebuilt.pin_memory) != bool(found.pin_memory):
        out["pin_memory"] = bool(rebuilt.pin_memory)
    return out


def unmet(expected: Dict[str, Any], anchor: Any, started: Iterable[Tuple[Any, Any]]) -> Optional[str]:
    """Why the epoch's DataLoader over `anchor` is not as `expected`, in a few words; None where it is.

    Args:
        expected: `promised`'s settings.
        anchor: the watched dataset.
        started: the (loader, iterator) weak references of the DataLoader epochs begun in this epoch.
    """
    begun = [(loader(), epoch()) for loader, epoch in started]
    mine = [epoch for loader, epoch in begun if loader is not None and epoch is not None and loader.dataset is anchor]
    if not mine:
        return f"no DataLoader over the {type(anchor).__name__} began an epoch in it"
    return "; ".join(_differences(expected, mine[-1])) or None


def _differences(expected: Dict[str, Any], epoch: Any) -> List[str]:
    """Each setting of `epoch`, a DataLoader's iterator, that is not as expected, and its workers if ended."""
    got = {
        "num_workers": epoch._num_workers,
        "prefetch_factor": getattr(epoch, "_prefetch_factor", None),  # a process's own fetch has none
        "pin_memory": bool(epoch._pin_memory),  # torch pins only where an accelerator is present
    }
    wrong = [k for k, v in expected.items() if got[k] != v]
    wrong = ["num_workers"] if "num_workers" in wrong else wrong  # its prefetch follows from its workers
    out = [f"{k}={expected[k]} was ordered, the DataLoader iterated has {got[k]}" for k in wrong]
    workers = list(getattr(epoch, "_workers", []))
    ended = sum(not w.is_alive() for w in workers)
    if not out and expected["num_workers"] and (ended or len(workers) != expected["num_workers"]):
        out.append(f"{ended} of its {len(workers)} worker processes ended")
    return out
