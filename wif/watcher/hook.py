"""The watch with no line changed: every DataLoader's epoch goes through it, wherever the loop is.

PyTorch Lightning's `Trainer.fit`, the Hugging Face `Trainer` and accelerate iterate the DataLoader inside the
framework, where no `wif.watch(...)` can be written. Each of them, however it wraps the loader (accelerate's
`DataLoaderShard` holds a `base_dataloader`, Lightning's fetchers and `CombinedLoader` call `iter()` on it),
starts an epoch with `DataLoader.__iter__`. `patch` wraps it (and `__init__`, to note where each loader was
made); an epoch of the training loader (the first whose epoch starts with gradients enabled, or the one
wif-advise names) is then `wif.watch`'s epoch, with its clock, figures, record and orders
(`wif.watcher.watch.hooked`); every other loader runs as it is. TraceML patches `DataLoader.__iter__` the same
way to time the wait (https://github.com/traceopt-ai/traceml), and so does Lightning for its own bookkeeping
(`lightning.pytorch.utilities.data._replace_dunder_methods`), which is why `__init__` keeps its signature.

This module imports nothing but the standard library and wif.watcher.origin (which imports nothing either):
it is patched in while torch itself is being imported (wif/watcher/boot/sitecustomize.py, where `wif-watch`
and `wif-advise` put it on PYTHONPATH); the watch is imported at the first epoch.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Dict, Iterator

from wif.watcher import origin

ORIGINAL: Dict[str, Any] = {}  # DataLoader's own __iter__ and __init__
ORDERS = "WIF_WATCH_ORDERS"  # wif.watcher.orders.ENV (that module imports torch)
BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")  # the folder put on PYTHONPATH
_said: list = []


def patch(cls: Any) -> None:
    """`cls` (torch's DataLoader) with its epochs watched and its loaders' birthplaces noted; once."""
    if ORIGINAL:
        return
    ORIGINAL["iter"], ORIGINAL["init"] = cls.__iter__, cls.__init__

    @functools.wraps(cls.__init__)  # its signature kept: Lightning re-creates loaders from it
    def __init__(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        ORIGINAL["init"](self, dataset, *args, **kwargs)
        origin.note(dataset)

    @functools.wraps(cls.__iter__)
    def __iter__(self: Any) -> Any:
        try:
            from wif.watcher.watch import hooked

            epoch = hooked(self, _Own(self))
        except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
            if os.environ.get(ORDERS):  # a measuring run of wif-advise: its failure is the run's, said there
                raise
            if not _said:
                _said.append(err)
                text = f"cannot watch this {type(self).__name__} ({type(err).__name__}: {err}); it runs unwatched"
                print(f"wif.watch: {text}", file=sys.stderr, flush=True)
            epoch = None
        return ORIGINAL["iter"](self) if epoch is None else epoch

    cls.__init__, cls.__iter__ = __init__, __iter__


def install() -> None:
    """The patch, where torch is imported already (a script forked warm, wif.advisor.warm)."""
    from torch.utils.data import DataLoader

    patch(DataLoader)


class _Own:
    """A DataLoader's own epoch, as DataLoader.__iter__ makes it: what the watch times where a framework
    iterates the loader (wif.watcher.found finds the loader in it, and orders put a candidate's copy there)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.wif_name = type(loader).__name__

    def __iter__(self) -> Iterator[Any]:
        return ORIGINAL["iter"](self.loader)

    def __len__(self) -> int:
        return len(self.loader)
