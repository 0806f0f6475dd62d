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
from wif.watcher import origin, ranks
from wif.watcher.found import anchor_of, batch_size_of, find_dataloader, settings_of
from wif.watcher.orders import ENV, Orders
from wif.watcher.record import Record, line

_sessions: Dict[int, "Session"] = {}  # by id() of the anchor (wif.watcher.found), which the session holds
_claimed: List["Session"] = []  # under orders or the hook: the one training loader's session
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

    Under wif-advise's orders, or with every DataLoader hooked (`claims`, wif.watcher.hook), one loader is
    watched, the training loader: the one WIF_WATCH_LOADER names, else the first whose epoch starts with
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
        claims: bool = False,
    ) -> None:
        self.anchor, self.say, self.ordered, self.claims = anchor_of(batches), say, ordered, claims or ordered
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
        self.starting = False  # up to its first batch: a DataLoader's own epoch started there is this epoch's
        self.handed, self.expected = 0, None  # batches handed out in this epoch, and its length where it has one
        self.current: Optional[Iterator[Any]] = None  # a hooked epoch as the framework holds it (`hooked`)

    def watched(self, batches: Iterable[Any]) -> bool:
        """At an epoch's start: whether this loader is watched (and, the first time, its record opened)."""
        if self.record is not None or self.passed:
            return not self.passed
        if self.claims and self not in _claimed:  # (a probe records nothing: its later epochs come back here)
            if _claimed or not self._training():
                self.passed = True
                return False
            _claimed.append(self)
        if self.ordered:
            self.orders = self.orders or Orders.from_env()  # a probe's, kept from epoch to epoch (nothing recorded)
            if self.orders.mode == "probe":  # wif-advise asks what the training loader is, and nothing more
                origin_ = origin.of(self.loader) if self.loader is not None else {}
                self.orders.probe({**settings_of(batches, self.loader), **origin_}, self.loader is not None)
                return True  # its first batches are timed (`epoch`), and nothing is recorded
        rank, size = ranks.world()
        self.ranked = size > 1 and torch.is_grad_enabled()  # every rank's training loader: one run, rank 0's
        if rank != 0:
            self.say = lambda text: None
        experiment, run_name, log = self.kept
        self.record = Record(self.params, experiment, run_name, log and rank == 0, self.orders)
        if self.record.log and self.record.own and "MLFLOW_TRACKING_URI" not in os.environ:
            where = os.path.abspath("mlflow.db")
            self.say(f"wif.watch: logging to {where} (or MLFLOW_TRACKING_URI; nowhere: WIF_WATCH=print)")
        return True

    def _training(self) -> bool:
        """Whether this is the training loader (at its first epoch): named, or iterated with gradients on."""
        named = os.environ.get(origin.NAMED)
        if not named:
            return torch.is_grad_enabled()
        return self.loader is not None and origin.is_named(named, self.loader)

    def epoch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """One pass over `batches` (this epoch's iterable): the batches as they come, timed. Under orders: as
        the measurement asks (wif.watcher.orders); a measurement whose last epoch the loop left early (a
        break, islice, zip) ends here, at the next epoch's start."""
        if not self.watched(batches):
            yield from batches
            return
        orders, record = self.orders, self.record
        if orders is not None and orders.mode == "probe":  # its first batches timed, and the script ends
            yield from orders.sample(self._started(batches))
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

    def _started(self, source: Iterable[Any]) -> Iterator[Any]:
        """`source`'s batches, its DataLoader's own epoch (started by the first) known as this epoch's (`hooked`)."""
        self.starting = True
        try:
            for batch in source:
                self.starting = False
                yield batch
        finally:
            self.starting = False

    def _timed(self, source: Iterable[Any]) -> Iterator[Any]:
        """The batches of `source`, timed by the loop's clock; the figures recorded when the pass ends (however)."""
        feed = TimedFeed(source, _as_is, lambda b: samples_in(b, self.batch_size))
        self.record.begin()
        self.handed, self.expected, self.starting, complete = 0, _length(source), True, False
        synchronize(_cuda())  # sync point: nothing from before is counted in this epoch
        t_start, t0 = time.monotonic(), time.perf_counter()
        try:
            for batch in feed:
                self.handed += 1
                self.starting = False
                yield batch
            complete = True
        finally:
            self.starting = False
            synchronize(_cuda())  # sync point: the epoch's queued work is done (CUDA may have started in it)
            stats = feed.stats(t_start, t0, None, 0.0, None)
            try:
                self._end(stats, self.handed, complete or self.taken())
            except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
                if self.orders is not None:
                    raise
                self._warn(err)

    def taken(self) -> bool:
        """Whether a hooked epoch is open with every batch handed out: a framework that counts its batches
        (Lightning's fetcher) never asks for the end, and the epoch is over when anything else starts."""
        return self.current is not None and self.expected is not None and self.handed >= self.expected

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
    mode = _mode()
    if mode is None:
        return batches  # type: ignore[return-value]
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


def _mode() -> Optional[str]:
    """WIF_WATCH's mode (None: off); an unknown value said once and taken as 1."""
    mode = os.environ.get("WIF_WATCH", "1")
    if mode == "0":
        return None
    if mode not in MODES:
        warn_once(f"WIF_WATCH={mode!r} is not one of {', '.join(MODES)}: watching as WIF_WATCH=1")
        os.environ["WIF_WATCH"] = mode = "1"  # said once
    return mode


def hooked(loader: DataLoader, own: Iterable[Any]) -> Optional[Iterator[Any]]:
    """An epoch of `loader` started by whatever iterates it (wif.watcher.hook): the watch's epoch where it is
    the training loader, None where it runs as it is (another loader, or one inside a watched epoch)."""
    mode = _mode()
    if mode is None:
        return None
    for other in _claimed:  # another loader's epoch begins (the validation pass): the training epoch ended
        if other.anchor is not loader.dataset and other.taken():
            other.current.close()
    session = _sessions.get(id(loader.dataset))
    if session is not None and session.anchor is loader.dataset:
        if session.starting or session.passed:  # the watched epoch's own DataLoader epoch; or not the training one
            return None
        if session.current is not None:
            session.current.close()  # its next epoch: the last one ended (the framework still holds it)
    elif _claimed:
        return None
    session = _session(own, None, None, mode != "print", mode == "quiet", bool(os.environ.get(ENV)), claims=True)
    session.current = session.epoch(own)
    return session.current


def _length(batches: Any) -> Optional[int]:
    try:
        return len(batches)
    except TypeError:  # not sized
        return None


def _session(
    batches: Iterable[Any],
    experiment: Optional[str],
    run_name: Optional[str],
    log: bool,
    quiet: bool,
    ordered: bool,
    claims: bool = False,
) -> Session:
    """The watch of this loader: the one kept by its anchor, or a new one."""
    anchor = anchor_of(batches)
    session = _sessions.get(id(anchor))
    if session is not None and session.anchor is anchor:
        return session
    rank = os.environ.get("RANK", "0")  # under torchrun: one line an epoch, rank 0's
    say = (lambda text: None) if quiet or rank != "0" else (lambda text: print(text, file=sys.stderr, flush=True))
    session = _sessions[id(anchor)] = Session(batches, experiment, run_name, log, say, ordered, claims)
    return session


def warn_once(text: str) -> None:
    """The watch's own trouble: one line on stderr, never a traceback in the user's training."""
    print(f"wif.watch: {text}", file=sys.stderr, flush=True)
