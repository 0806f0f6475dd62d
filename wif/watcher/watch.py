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
from wif.run.ddp.gather import job_epoch
from wif.run.loop import TimedFeed, samples_in
from wif.watcher import ranks
from wif.watcher.found import anchor_of, batch_size_of, find_dataloader, settings_of
from wif.watcher.orders import ENV, Orders
from wif.watcher.record import Record

WAITED = 0.05  # a step that waits for data more than this share of the epoch is held back by the loader
_sessions: Dict[int, "Session"] = {}  # by id() of the anchor (wif.watcher.found), which the session holds
_claimed: List["Session"] = []  # under orders: the one session they went to
MODES = ("1", "0", "print", "quiet")  # WIF_WATCH


def _cuda() -> torch.device:
    """The device the script computes on: CUDA where it has started it (the watch never starts it)."""
    if torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Session:
    """One watched loader over the whole script: its epochs, numbered on across `wif.watch` calls (a new
    wrapper or a new DataLoader over the same dataset each epoch included), and its one MLflow run, opened
    (with its memory sampler) at its first epoch.

    Under wif-advise's orders, the orders go to the training loader: the first whose epoch starts with
    gradients enabled. A loader first iterated under `torch.no_grad()` or `inference_mode()` (a validation
    pass, a sanity check before training) and any other loader run as they are, unwatched."""

    def __init__(
        self,
        batches: Iterable[Any],
        experiment: Optional[str],
        run_name: Optional[str],
        log: bool,
        say: Callable[[str], None],
        ordered: bool = False,
    ) -> None:
        self.anchor, self.say, self.ordered = anchor_of(batches), say, ordered
        found = find_dataloader(batches)
        self.loader: Optional[DataLoader] = found[2] if found else None
        size = batch_size_of(self.loader) if self.loader is not None else getattr(batches, "batch_size", None)
        self.batch_size = int(size or 1)  # a batch of no tensor with a batch dimension counts as this many
        self.params = settings_of(batches, self.loader)
        self.kept = (experiment, run_name, log)
        self.orders: Optional[Orders] = None
        self.record: Optional[Record] = None
        self.passed = False  # under orders: not the training loader, run as it is
        self.ranked = False  # a distributed script's training loader: the ranks' figures gathered (wif.watcher.ranks)
        self.epochs: List[Dict[str, float]] = []
        self.warned = False

    def watched(self, batches: Iterable[Any]) -> bool:
        """At an epoch's start: whether this loader is watched (and, the first time, its record opened)."""
        if self.record is not None or self.passed:
            return not self.passed
        if self.ordered:
            if _claimed or not torch.is_grad_enabled():
                self.passed = True
                return False
            _claimed.append(self)
            self.orders = Orders.from_env()
            if self.orders.mode == "probe":  # wif-advise asks what the training loader is, and nothing more
                dataset = {"dataset": type(self.loader.dataset).__name__} if self.loader is not None else {}
                self.orders.probe({**settings_of(batches, self.loader), **dataset}, self.loader is not None)
        rank, size = ranks.world()
        self.ranked = size > 1 and torch.is_grad_enabled()  # every rank's training loader: one run, rank 0's
        if rank != 0:
            self.say = lambda text: None
        experiment, run_name, log = self.kept
        self.record = Record(self.params, experiment, run_name, log and rank == 0, self.orders)
        return True

    def epoch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """One pass over `batches` (this epoch's iterable): the batches as they come, timed. Under orders: as
        the measurement asks (wif.watcher.orders); a measurement whose last epoch the loop left early (a
        break, islice, zip) ends here, at the next epoch's start."""
        if not self.watched(batches):
            yield from batches
            return
        orders, record = self.orders, self.record
        if orders is not None:
            if orders.done:
                orders.leave(record)
            orders.take(batches, find_dataloader(batches))  # the candidate's settings, where wif-advise gives any
            if orders.mode == "loader_only":  # the loader alone; the step never runs
                while not orders.done:
                    for _ in self._timed(orders.batches(batches, len(self.epochs))):
                        pass
                orders.leave(record)
        yield from self._timed(orders.batches(batches, len(self.epochs)) if orders else batches)
        if orders is not None and orders.done:
            orders.leave(record)

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
            try:
                self._end(stats, batches, complete)
            except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
                if self.orders is not None:
                    raise
                self._warn(err)

    def _warn(self, err: Exception) -> None:
        if not self.warned:
            self.warned = True
            warn_once(f"an epoch could not be recorded ({type(err).__name__}: {err}); your training goes on")

    def _end(self, stats: Any, batches: int, complete: bool) -> None:
        # The step is the time between batches, whatever it synchronizes: the loop copies nothing of its own.
        step = replace(stats, copy_s=0.0, compute_s=max(stats.epoch_time_s - stats.data_wait_s, 0.0))
        e = {"epoch": len(self.epochs), **figures(asdict(step)), "samples": stats.samples, "batches": batches}
        if self.ranked:  # the job's epoch: its slowest rank's, each rank's beside it
            job = job_epoch(ranks.gather({**asdict(step), "samples": stats.samples}))
            e.update(figures(job), samples=job["samples"], compute_threads=stats.compute_threads)
            e.update({k: v for k, v in job.items() if k.startswith("rank") or k == "slowest_rank"})
        e.update(self.record.end(stats.t_start, _cuda()))
        self.epochs.append(e)
        self.record.log_epoch(e, self.epochs)
        self.say(line(e, complete))
        if self.orders is not None:
            self.orders.after_epoch(self.epochs, self.record, self.ranked)


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


class Watched:
    """What `wif.watch` returns: iterate it once an epoch; everything else is the wrapped loader's."""

    def __init__(self, batches: Iterable[Any], session: Session) -> None:
        self.batches, self.session = batches, session

    def __iter__(self) -> Iterator[Any]:
        return self.session.epoch(self.batches)

    def __len__(self) -> int:
        session = self.session
        orders = session.orders or (Orders.from_env() if session.ordered and not session.passed else None)
        if orders is not None:  # under orders (or before the first epoch decides them): capped
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
    """`for batch in wif.watch(train_loader):` times each pass as an epoch and logs it. Call it once, or once
    an epoch on the same loader: the epochs go on in one MLflow run (`experiment`: the store's experiment, by
    default MLFLOW_EXPERIMENT_NAME or the study's; `log=False`: no MLflow). The environment decides without
    touching the script: WIF_WATCH=0 turns it off, =print says each epoch's line and logs nothing (no store is
    opened or made), =quiet logs and says nothing."""
    mode = os.environ.get("WIF_WATCH", "1")
    if mode == "0":
        return batches  # type: ignore[return-value]
    if mode not in MODES:
        warn_once(f"WIF_WATCH={mode!r} is not one of {', '.join(MODES)}: watching as WIF_WATCH=1")
        os.environ["WIF_WATCH"] = "1"  # said once
    log, quiet = log and mode != "print", quiet or mode == "quiet"
    ordered = bool(os.environ.get(ENV))
    try:
        session = _session(batches, experiment, run_name, log, quiet, ordered)
    except Exception as err:  # noqa: BLE001 - without orders, the watch's own failure is a warning line
        if ordered:
            raise
        warn_once(f"cannot watch this {type(batches).__name__} ({type(err).__name__}: {err}); it runs unwatched")
        return batches  # type: ignore[return-value]
    return Watched(batches, session)


def _session(
    batches: Iterable[Any], experiment: Optional[str], run_name: Optional[str], log: bool, quiet: bool, ordered: bool
) -> Session:
    """The watch of this loader: the one kept by its anchor, or a new one."""
    anchor = anchor_of(batches)
    session = _sessions.get(id(anchor))
    if session is not None and session.anchor is anchor:
        return session
    rank = os.environ.get("RANK", "0")  # under torchrun: one line an epoch, rank 0's
    say = (lambda text: None) if quiet or rank != "0" else (lambda text: print(text, file=sys.stderr, flush=True))
    session = _sessions[id(anchor)] = Session(batches, experiment, run_name, log, say, ordered)
    return session


def warn_once(text: str) -> None:
    """The watch's own trouble: one line on stderr, never a traceback in the user's training."""
    print(f"wif.watch: {text}", file=sys.stderr, flush=True)
