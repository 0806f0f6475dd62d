"""One watched loader over the whole script: its state, its epochs timed, and its record.

`wif.watcher.watch` keeps one Session per anchor (wif.watcher.found) and hands each epoch to it.
"""

from __future__ import annotations

import enum
import os
import time
from dataclasses import asdict, replace
from typing import Any, Dict, Iterable, Iterator, List, Optional

import torch
from torch.utils.data import DataLoader

from wif.measure import names
from wif.measure.epochs import figures
from wif.measure.timing import synchronize
from wif.run.ddp.gather import job_epoch
from wif.run.loop import TimedFeed, samples_in
from wif.watcher import origin, proof, ranks, served
from wif.watcher.found import anchor_of, batch_size_of, find_dataloader, length_of, settings_of
from wif.watcher.options import WatchOptions, silent, to_stderr, warn
from wif.watcher.orders import Orders
from wif.watcher.record import Record, line
from wif.watcher.windows import Opened, Window, as_the_script, epoch_start, script_share, stream, watched_alone

# NOTE [ The watch's states ]
# A Session's `state` moves once, at its loader's first epoch (`claim_loader`), and then stays:
#   UNDECIDED -> PASSED    another loader is claimed, or this one is not the training loader: it runs as it
#                          is, for good. Only a session that claims, under orders or the hook, can pass.
#   UNDECIDED -> PROBING   wif-advise's probe: the first batches are timed, nothing is recorded, and the script
#                          ends (SystemExit) after them or at the next epoch's start.
#   UNDECIDED -> WATCHED   its Record opened: every epoch timed, said and logged.
# A claim is made once per script: CLAIMED holds the one training loader's session.
# A WATCHED session under orders ends the script (SystemExit) at the epoch where the orders are done.
# Record's failure to open leaves the session UNDECIDED but claimed; its next epoch tries again.
# Beside the state, a few flags:
#   ranked            set at the claim: a distributed script's training loader, its ranks' figures gathered.
#   starting          true from an epoch's start to its first batch: a DataLoader epoch started then is this
#                     epoch's own (`hooked` lets it run as it is).
#   handed, expected  the batches handed out in this epoch, and its length where it has one.
#   epoch_index       the script's epoch under way; each is timed in windows (NOTE [ Windows ]).
#   current           a hooked epoch as the framework holds it; `taken` once every batch was handed out.
#   warned            an epoch that could not be recorded was said; later failures are quiet.


class State(enum.Enum):
    """Where a Session stands. See NOTE [ The watch's states ]."""

    UNDECIDED = "undecided"
    PASSED = "passed"
    PROBING = "probing"
    WATCHED = "watched"


CLAIMED: List["Session"] = []  # under orders or the hook: the one training loader's session


def _cuda() -> torch.device:
    """The device the script computes on: CUDA where it has started it (the watch never starts it)."""
    if torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Session:
    """One watched loader over the whole script: its epochs and its one MLflow run.

    Its epochs are numbered on across `wif.watch` calls, a new wrapper or DataLoader each epoch included.
    The run and its memory sampler open at the first epoch. Under wif-advise's orders, or with every
    DataLoader hooked, one loader is watched: the training loader. That is the one WIF_WATCH_LOADER names,
    else the first whose epoch starts with gradients enabled. A loader first iterated under `torch.no_grad()`
    or `inference_mode()`, such as a validation pass, runs as it is. See NOTE [ The watch's states ].
    """

    def __init__(self, batches: Iterable[Any], options: WatchOptions) -> None:
        self.anchor, self.options = anchor_of(batches), options
        self.ordered, self.claims = options.ordered, options.claims or options.ordered
        under_torchrun = os.environ.get("RANK", "0") != "0"  # one line an epoch, rank 0's
        self.say = silent if options.quiet or under_torchrun else to_stderr
        found = find_dataloader(batches)
        self.loader: Optional[DataLoader] = found.loader if found else None
        size = batch_size_of(self.loader) if self.loader is not None else getattr(batches, "batch_size", None)
        self.batch_size = int(size or 1)  # a batch with no tensor of a batch dimension counts as this many
        self.params = settings_of(batches, self.loader)
        self.state = State.UNDECIDED
        self.orders: Optional[Orders] = None
        self.record: Optional[Record] = None
        self.epochs: List[Dict[str, float]] = []
        self.ranked = False
        self.warned = False
        self.starting = False
        self.handed, self.expected = 0, None
        self.epoch_index = -1  # the script's epoch under way, from 0: its windows are numbered apart
        self.own: Optional[int] = None  # its batches, uncut (None: a stream); and its start, from its first window
        self.start_s = 0.0
        self.alone = watched_alone()  # the windows without orders
        self.span = self.alone.seconds  # a ranked session's windows: this long at rank 0's pace
        self.current: Optional[Iterator[Any]] = None

    # ------------------------------------------------------------------ the claim
    def claim_loader(self, batches: Iterable[Any]) -> bool:
        """At an epoch's start: settles the state at the first epoch; whether this epoch is watched.

        See NOTE [ The watch's states ].
        """
        if self.state is not State.UNDECIDED:
            return self.state is not State.PASSED
        if self.claims and self not in CLAIMED:
            if CLAIMED or not self._training():
                self.state = State.PASSED
                return False
            CLAIMED.append(self)
        if self.ordered:
            self.orders = self.orders or Orders.from_env()
            if self.orders.mode == "probe":  # wif-advise asks what the training loader is, and nothing more
                origin_ = origin.of(self.loader) if self.loader is not None else {}
                where = {"step_device": _cuda().type}  # CUDA started by the first epoch: the step runs there
                self.orders.probe({**settings_of(batches, self.loader), **origin_, **where}, self.loader is not None)
                self.state = State.PROBING
                return True
        self._open_record()
        return True

    def _training(self) -> bool:
        """Whether this is the training loader at its first epoch: named, or iterated with gradients on."""
        named = os.environ.get(origin.NAMED)
        if not named:
            return torch.is_grad_enabled()
        return self.loader is not None and origin.is_named(named, self.loader)

    def _open_record(self) -> None:
        """The session's Record, rank 0's alone logged; the state becomes WATCHED."""
        rank, size = ranks.world()
        self.ranked = size > 1 and torch.is_grad_enabled()  # every rank's training loader: one run, rank 0's
        if self.ranked:  # no rank's own clock cuts: the first epoch is one window (NOTE [ Windows ])
            self.alone = replace(self.alone, seconds=None)
        if rank != 0:
            self.say = silent
        o = self.options
        self.record = Record(
            self.params, experiment=o.experiment, run_name=o.run_name, log=o.log and rank == 0, orders=self.orders
        )
        self.state = State.WATCHED
        if self.record.log and self.record.own and "MLFLOW_TRACKING_URI" not in os.environ:
            where = os.path.abspath("mlflow.db")
            self.say(f"wif.watch: logging to {where} (or MLFLOW_TRACKING_URI; nowhere: WIF_WATCH=print)")

    # ------------------------------------------------------------------ an epoch
    def epoch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """One pass over `batches`, this epoch's iterable: the batches as they come, timed.

        Under orders, as the measurement asks (wif.watcher.orders). A measurement whose last epoch the loop
        left early, by a break, islice or zip, ends here at the next epoch's start.
        """
        if not self.claim_loader(batches):
            yield from batches
            return
        orders = self.orders
        if orders is None:
            yield from self._timed(batches, offers=length_of(batches))
            return
        if self.state is State.PROBING:  # its first batches timed, and the script ends
            yield from orders.sample(self._started(batches))
        self._obey(orders, batches)
        offers = length_of(orders.source(batches))
        self.record.stream = self.record.stream or offers is None  # said by wif-advise: what its figures assume
        yield from self._timed(orders.batches(batches, len(self.epochs)), offers=offers)
        if orders.done:
            orders.leave(self.record)

    def _obey(self, orders: Orders, batches: Iterable[Any]) -> None:
        """The orders at an epoch's start: leave when done, swap in the candidate's loader, or run the loader alone."""
        if orders.done:
            orders.leave(self.record)
        orders.take(batches, find_dataloader(batches))
        if orders.mode == "loader_only":  # the step never runs
            while True:
                while not orders.done:
                    for _ in self._timed(orders.batches(batches, len(self.epochs))):
                        pass
                orders = self._follow(orders, batches)

    def _follow(self, orders: Orders, batches: Iterable[Any]) -> Orders:
        """The next candidate's orders in this process; leaves where none comes.

        See NOTE [ Trials in one process ] in wif.watcher.served.
        """
        if not orders.spec.get("serve") or ranks.world()[1] > 1:  # a distributed script's ranks leave together
            orders.leave(self.record)
        self.record.finish()  # its run is read as soon as wif-advise hears it is done
        found = find_dataloader(batches)  # the script's own where no setting was ordered: its workers end too
        served.end_workers(orders.rebuilt, found.loader if found else None)  # before the next order is awaited
        spec = served.next_order(orders.spec)
        if spec is None:
            orders.leave(self.record)
        self.orders, self.epochs = served.follow(orders, spec, batches), []
        self._open_record()
        return self.orders

    def _started(self, source: Iterable[Any]) -> Iterator[Any]:
        """`source`'s batches; a DataLoader epoch started by the first is this epoch's own (`hooked`)."""
        self.starting = True
        try:
            for batch in source:
                self.starting = False
                yield batch
        finally:
            self.starting = False

    def _timed(self, source: Iterable[Any], offers: Optional[int] = None) -> Iterator[Any]:
        """The epoch's batches of `source`, timed window by window. See NOTE [ Windows ] in wif.watcher.windows.

        It ends at a window's end where the orders are done. `offers`: the script's epoch's own length, before
        any cut.
        """
        self.handed, self.expected, self.starting = 0, length_of(source), True
        self.epoch_index, self.own, self.start_s = self.epoch_index + 1, offers, 0.0
        proof.STARTED.clear()  # the DataLoader epochs this one begins, noted from here
        batches, first, ended = stream(source), True, False
        try:
            while True:
                window = Window(batches, self.orders.windows if self.orders is not None else self.alone)
                yield from self._window(window, first=first)
                if not window.closed:
                    ended = True
                    return
                first = False
                if self.orders is not None and self.orders.done:
                    return  # the caller leaves, or serves the next candidate, within the epoch
        finally:  # what the script's epochs offer, for a measurement that ran out (wif.advisor.script_runner)
            self.record.offered(offers if ended and offers is not None else self.handed)
            self.record.send_held()  # no window follows at once: what the windows held back goes out

    def _window(self, window: Window, first: bool) -> Iterator[Any]:
        """One window's batches, timed by the loop's clock; its figures recorded however it ends.

        The epoch's first window proves the orders at its first batch (wif.watcher.proof).
        """
        feed = TimedFeed(window, lambda b: b, count=lambda b: samples_in(b, self.batch_size))
        self.record.begin(follows=not first)
        proving, proven = first and self.orders is not None and self.orders.promise is not None, True
        handed, complete = self.handed, False
        copied = self.orders.copies.s if self.orders is not None else 0.0
        synchronize(_cuda())  # sync point: nothing from before is counted in this window
        opened = Opened(t_start=time.monotonic(), t0=time.perf_counter(), copied_s=copied, first=first)
        try:
            for batch in feed:
                self.handed += 1
                self.starting = False
                if proving:  # once, at the first batch: its workers have started
                    proving = proven = False
                    self.orders.prove(self.anchor, proof.started())
                    proven = True
                yield batch
            complete = True
        finally:
            self.starting = False
            # else the order did not reach the loader, or a short window past the first: no figure
            if proven and window.windows.figure(first, window.closed, self.handed - handed):
                self._close(feed, opened, complete=complete, batches=self.handed - handed, closed=window.closed)
            else:
                self.record.drop()

    def _close(self, feed: TimedFeed, opened: Opened, *, complete: bool, batches: int, closed: bool) -> None:
        """The window's end, however its pass ended: its figures from `feed`, recorded.

        `complete`: the loop took every batch of it; `closed`: its count or clock closed it, the next may follow.
        Under orders its figure is the script's own: NOTE [ A window times the script's own run ].
        """
        synchronize(_cuda())  # sync point: the window's queued work is done (CUDA may have started in it)
        stats = feed.stats(t_start=opened.t_start, t0=opened.t0, train_loss=None, compute_s=0.0, gpu_idle_s=None)
        raw: Dict[str, float] = {}
        if self.orders is not None:
            self.start_s = (
                epoch_start(stats.first_batch_s, stats.data_wait_s, batches) if opened.first else self.start_s
            )
            raw = {names.WINDOW_TIME_S: stats.epoch_time_s, names.EPOCH_START_S: self.start_s}
            left = script_share(self.start_s, batches, self.own, opened.first) + self.orders.copies.s - opened.copied_s
            stats = as_the_script(stats, left)
        whole = opened.first and (not closed or self.handed == self.expected)  # the epoch's own
        try:
            self._end(stats, batches, complete=complete or self.taken(), whole=whole, raw=raw, follows=closed)
        except Exception as err:  # noqa: BLE001 - the watch's own failure never stops the training
            if self.orders is not None:
                raise
            self._warn_unrecorded(err)

    def taken(self) -> bool:
        """Whether a hooked epoch is open with every batch handed out: Lightning's fetcher never asks for the end.

        It counts its batches: the epoch is over when anything else starts."""
        return self.current is not None and self.expected is not None and self.handed >= self.expected

    def _warn_unrecorded(self, err: Exception) -> None:
        """An epoch that could not be recorded, said for the first one only."""
        if not self.warned:
            self.warned = True
            warn(f"an epoch could not be recorded ({type(err).__name__}: {err}); your training goes on")

    def _end(self, stats: Any, batches: int, *, complete: bool, whole: bool, raw: Dict, follows: bool) -> None:
        """The window's figures: recorded, logged, said in one line, and handed to the orders.

        Where the next window `follows` at once, the PSS read waits, and under orders the MLflow run. See
        NOTE [ A window times the script's own run ] in wif.watcher.windows."""
        # The step is the time between batches, whatever it synchronizes: the loop copies nothing of its own.
        step = replace(stats, copy_s=0.0, compute_s=max(stats.epoch_time_s - stats.data_wait_s, 0.0))
        e = {"epoch": len(self.epochs), **figures(asdict(step)), "samples": stats.samples, "batches": batches}
        e.update({names.SCRIPT_EPOCH: self.epoch_index, names.WINDOWED: float(not whole), **raw})
        if self.ranked:  # the job's epoch: its slowest rank's, each rank's beside it
            rows = ranks.gather({**asdict(step), "samples": stats.samples, "batches": batches})
            if self.orders is None:  # every rank's next windows close at the same batch, at rank 0's pace
                self.alone = replace(self.alone, batches=ranks.count_for(rows, self.span))
            job = job_epoch(rows)
            e.update(figures(job), samples=job["samples"])
            e[names.COMPUTE_THREADS] = stats.compute_threads
            e.update({k: v for k, v in job.items() if k.startswith("rank") or k == "slowest_rank"})
        e.update(self.record.end(stats.t_start, _cuda(), pss=not follows))
        self.epochs.append(e)
        self.record.log_epoch(e, self.epochs, hold=follows and self.orders is not None)
        self.say(line(e, complete))
        if self.orders is not None:
            self.orders.after_epoch(self.epochs, self.record, self.ranked)
