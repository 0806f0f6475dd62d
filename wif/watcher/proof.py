"""Whether a candidate's settings reached the DataLoader that an epoch under orders really iterates.

An order puts a rebuilt DataLoader where the watched object holds it (wif.watcher.orders). A loop may iterate
another reference to the old one, and the trial would time the script's own setting under the candidate's name.
So at its first batch, each epoch under loader orders checks the iterator of the DataLoader over its dataset
that began in it. The hook notes each in STARTED. Each argument in wif.dataloader_args must be as ordered, and
its workers alive. Where not, the script ends with one line that starts with UNREACHED, and nothing is recorded.

Standard library and wif.dataloader_args only: the hook imports this while torch is being imported.
"""

from __future__ import annotations

import collections
import multiprocessing
import weakref
from typing import Any, Deque, Dict, Iterable, List, Optional, Tuple

from wif import dataloader_args

UNREACHED = "the order did not reach the loader"
CONTEXT = "multiprocessing_context"  # proven by its start method, read off the workers
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
    """What the iterated DataLoader must show once `rebuilt` replaces `found`: each argument of the table.

    Its workers always; what needs workers where it has them; one the machine may overrule (pinning) where
    the order changes it. A context is held as asked and named by its start method when proven.
    """
    out: Dict[str, Any] = {}
    for arg in dataloader_args.ARGS:
        if arg.needs_workers and not rebuilt.num_workers:
            continue
        asked = _plain(arg, arg.of(rebuilt))
        if arg.as_asked or asked != _plain(arg, arg.of(found)):
            out[arg.name] = asked
    return out


def unmet(expected: Dict[str, Any], anchor: Any, started: Iterable[Tuple[Any, Any]]) -> Optional[str]:
    """Why the epoch's DataLoader over `anchor` is not as `expected`, in a few words; None where it is.

    Args:
        expected: `promised`'s settings.
        anchor: the watched dataset.
        started: the (loader, iterator) weak references of the DataLoader epochs begun in this epoch.
    """
    begun = [(loader(), epoch()) for loader, epoch in started]
    mine = [(loader, epoch) for loader, epoch in begun if loader is not None and epoch is not None]
    mine = [pair for pair in mine if pair[0].dataset is anchor]
    if not mine:
        return f"no DataLoader over the {type(anchor).__name__} began an epoch in it"
    loader, epoch = mine[-1]
    return "; ".join(_differences(expected, loader, epoch)) or None


def _differences(expected: Dict[str, Any], loader: Any, epoch: Any) -> List[str]:
    """Each setting of `epoch`, `loader`'s iterator, that is not as expected, and its workers if ended."""
    want = {k: _start_method(v) if k == CONTEXT else v for k, v in expected.items()}
    got = {k: _read(dataloader_args.BY_NAME[k], loader, epoch) for k in expected}
    wrong = [k for k in expected if got[k] != want[k] and not (k == CONTEXT and want[k] is None)]
    wrong = ["num_workers"] if "num_workers" in wrong else wrong  # the rest follows from its workers
    out = [f"{k}={want[k]!r} was ordered, the DataLoader iterated has {got[k]!r}" for k in wrong]
    workers = list(getattr(epoch, "_workers", []))
    ended = sum(not w.is_alive() for w in workers)
    if not out and expected["num_workers"] and (ended or len(workers) != expected["num_workers"]):
        out.append(f"{ended} of its {len(workers)} worker processes ended")
    return out


def _read(arg: dataloader_args.DataLoaderArg, loader: Any, epoch: Any) -> Any:
    """`arg` as the live iterator `epoch` has it, as the table says to read it."""
    if arg.on_iterator == dataloader_args.WORKERS:  # the context is not kept: its workers' start method is
        methods = {getattr(getattr(w, "_popen", None), "method", None) for w in getattr(epoch, "_workers", [])}
        return ", ".join(sorted(filter(None, methods))) or None
    if not arg.on_iterator:  # a copy the iterator does not keep as asked: the DataLoader's own
        return _plain(arg, arg.of(loader))
    if not arg.keyword:  # on the worker_init_fn that the iterator's workers run
        return arg.carried(getattr(epoch, arg.on_iterator, None))
    return _plain(arg, getattr(epoch, arg.on_iterator, arg.default))  # a process's own fetch has no prefetch


def _plain(arg: dataloader_args.DataLoaderArg, value: Any) -> Any:
    """`value` as the proof compares it: a flag as a bool."""
    return bool(value) if isinstance(arg.default, bool) else value


def _start_method(context: Any) -> Optional[str]:
    """The start method of `context`, a DataLoader's multiprocessing context; None: the default, not yet fixed."""
    if context is None:
        return multiprocessing.get_start_method(allow_none=True)  # never fixes it: the script may still set it
    return context.get_start_method()
