"""`wif.watch(loader)`: the one line a user adds to their own loop, `for batch in wif.watch(train_loader):`.

Each pass over it is an epoch, timed by the loop's own clock (`wif.run.loop.TimedFeed`): the host's wait in
`next()` (the loader's part), the first batch, the samples; the time between batches is the user's step, with
whatever it synchronizes. The device is synchronized at an epoch's start and end only (where the script uses
CUDA), never per batch, and nothing is read off the device. The memory of the process and its workers comes
from the study's process-tree sampler (a thread here, `wif.watcher.record`); every epoch is logged to
MLflow (tag `wif.kind=watch`: the study's report never reads it) and said in one line: did the step wait for
data. Any iterable of batches of any structure; a DataLoader, or a wrapper holding one (timm's PrefetchLoader
keeps it as `.loader`), whose DataLoader is found for its settings.

With orders from `wif-advise -- python my_train.py ...` (the environment: `wif.watcher.orders`) the same
line runs advise's measurements in the script's own process, the script unchanged.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, replace
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import torch
from torch.utils.data import DataLoader

from wif.measure.epochs import figures
from wif.measure.timing import synchronize
from wif.run.loop import TimedFeed, samples_in
from wif.watcher.orders import ENV, Orders
from wif.watcher.record import Record

WAITED = 0.05  # a step that waits for data more than this share of the epoch is held back by the loader
HOLDERS = ("loader", "_loader", "dataloader", "data_loader", "_dataloader", "base_loader", "train_loader")
_sessions: Dict[int, "Session"] = {}


def find_dataloader(batches: Any, depth: int = 3) -> Optional[tuple]:
    """(holder, attribute, DataLoader) for the DataLoader inside `batches` (holder None: it is one); None
    where there is none. Wrappers are searched by the usual attribute names first, then every attribute."""
    if isinstance(batches, DataLoader):
        return None, "", batches
    if depth == 0:
        return None
    attrs = getattr(batches, "__dict__", {})
    for name in [n for n in HOLDERS if n in attrs] + [n for n in attrs if n not in HOLDERS]:
        value = attrs[name]
        if isinstance(value, DataLoader):
            return batches, name, value
        if value is not None and not isinstance(value, (str, bytes, int, float, torch.Tensor, dict, list, tuple)):
            found = find_dataloader(value, depth - 1)
            if found is not None:
                return (found[0] or batches, found[1] or name, found[2])
    return None


def settings_of(batches: Any, loader: Optional[DataLoader]) -> Dict[str, Any]:
    """The loader's settings as the run's params (what `wif-advise` keeps or changes)."""
    if loader is None:
        return {"loader": type(batches).__name__}
    return {
        "loader": type(batches).__name__,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "in_order": getattr(loader, "in_order", True),
        "drop_last": loader.drop_last,
        "dataset_len": _len(loader.dataset),
    }


def _cuda() -> torch.device:
    """The device the script computes on: CUDA where it has started it (the watch never starts it)."""
    if torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Session:
    """One watched loader over the whole script: its epochs, numbered on across `wif.watch` calls, and its
    one MLflow run."""

    def __init__(
        self,
        batches: Iterable[Any],
        experiment: Optional[str],
        run_name: Optional[str],
        log: bool,
        say: Callable[[str], None],
        orders: Optional[Orders] = None,
    ) -> None:
        self.batches, self.say, self.orders = batches, say, orders
        found = find_dataloader(batches)
        if self.orders is not None:
            self.orders.take(batches, found)  # the candidate's settings, where wif-advise gives any
            found = find_dataloader(self.orders.source(batches))
        self.loader: Optional[DataLoader] = found[2] if found else None
        self.batch_size = int(getattr(self.loader, "batch_size", None) or getattr(batches, "batch_size", 0) or 1)
        self.record = Record(settings_of(batches, self.loader), experiment, run_name, log, self.orders)
        self.epochs: List[Dict[str, float]] = []

    def epoch(self) -> Iterator[Any]:
        """One pass: the batches as they come, timed. Under orders: as the measurement asks (wif.watcher.orders)."""
        orders = self.orders
        if orders is not None and orders.mode == "loader_only":  # the loader alone; the step never runs
            while not orders.done:
                for _ in self._timed(orders.batches(self.batches, len(self.epochs))):
                    pass
            orders.leave(self.record)
        yield from self._timed(orders.batches(self.batches, len(self.epochs)) if orders else self.batches)
        if orders is not None and orders.done:
            orders.leave(self.record)

    def _timed(self, source: Iterable[Any]) -> Iterator[Any]:
        """The batches of `source`, timed by the loop's clock; the figures recorded when the pass ends (however)."""
        feed = TimedFeed(source, _as_is, lambda b: samples_in(b, self.batch_size))
        self.record.begin()
        batches, complete = 0, False
        synchronize(_cuda())  # sync point: nothing from before is counted in this epoch
        t_start, t0 = time.monotonic(), time.perf_counter()
        try:
            for batch in feed:
                batches += 1
                yield batch
            complete = True
        finally:
            synchronize(_cuda())  # sync point: the epoch's queued work is done (CUDA may have started in it)
            stats = feed.stats(t_start, t0, None, 0.0, None)
            self._end(stats, batches, complete)

    def _end(self, stats: Any, batches: int, complete: bool) -> None:
        # The step is the time between batches, whatever it synchronizes: the loop copies nothing of its own.
        step = replace(stats, copy_s=0.0, compute_s=max(stats.epoch_time_s - stats.data_wait_s, 0.0))
        e = {"epoch": len(self.epochs), **figures(asdict(step)), "samples": stats.samples, "batches": batches}
        e.update(self.record.end(stats.t_start, _cuda()))
        self.epochs.append(e)
        self.record.log_epoch(e, self.epochs)
        self.say(line(e, complete))
        if self.orders is not None:
            self.orders.after_epoch(self.epochs, self.record)


def line(e: Dict[str, float], complete: bool = True) -> str:
    """The epoch's one line: its time and whether the step waited for data."""
    share = e["data_wait_share"]
    head = (
        f"wif.watch: epoch {int(e['epoch']) + 1}: {e['epoch_time_s']:.3f} s, {int(e['batches'])} batches, "
        f"{e['throughput_img_s']:,.0f} samples/s, first batch {e['first_batch_s']:.3f} s"
    )
    if not complete:
        head += " (ended early)"
    if share > WAITED:
        verdict = f"waited for data {e['data_wait_s']:.3f} s ({share:.0%} of the epoch): the loader holds the step back"
    else:
        verdict = f"did not wait for data ({share:.0%} of the epoch in next())"
    ram = next(((e[k], k[9:12].upper()) for k in ("ram_peak_pss_mb", "ram_peak_rss_mb") if k in e), None)
    if ram is not None:
        verdict += f"; RAM peak {ram[0]:,.0f} MB ({ram[1]}, the process and {int(e.get('workers_peak', 0))} workers)"
    return f"{head}; {verdict}"


def _as_is(batch: Any) -> Any:
    return batch


def _len(dataset: Any) -> Optional[int]:
    try:
        return len(dataset)
    except TypeError:  # an IterableDataset without a length
        return None


class Watched:
    """What `wif.watch` returns: iterate it once an epoch; everything else is the wrapped loader's."""

    def __init__(self, batches: Iterable[Any], session: Session) -> None:
        self.batches, self.session = batches, session

    def __iter__(self) -> Iterator[Any]:
        return self.session.epoch()

    def __len__(self) -> int:
        if self.session.orders is not None:
            return self.session.orders.length(self.batches)
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
    """`for batch in wif.watch(train_loader):` times each pass as an epoch and logs it. Call it once, or once
    an epoch on the same loader: the epochs go on in one MLflow run (`experiment`: the store's experiment, by
    default MLFLOW_EXPERIMENT_NAME or the study's; `log=False`: no MLflow). WIF_WATCH=0 turns it off."""
    if os.environ.get("WIF_WATCH", "1") == "0":
        return batches  # type: ignore[return-value]
    session = _sessions.get(id(batches))
    if session is None or session.batches is not batches:
        say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
        orders = None
        if not _sessions and os.environ.get(ENV):  # wif-advise's orders go to the first loader watched
            orders = Orders.from_env()
            if orders.mode == "probe":  # wif-advise asks what the loader is, and nothing more
                found = find_dataloader(batches)
                orders.probe(settings_of(batches, found[2] if found else None), found is not None)
        elif os.environ.get(ENV):  # another loader (validation, say) of a script under orders: passed through
            return batches  # type: ignore[return-value]
        session = _sessions[id(batches)] = Session(batches, experiment, run_name, log, say, orders)
    return Watched(batches, session)
