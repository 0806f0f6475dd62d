"""One watched loop over the whole script: its state, its epochs timed, and its record.

`wif.watcher.watch` keeps one Session per loop and hands each epoch to it: NOTE [ One loop, one session ] there.
"""

from __future__ import annotations

import atexit
import os
import time
from dataclasses import asdict, replace
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader

from wif.measure import names
from wif.measure.epochs import figures
from wif.measure.timing import synchronize
from wif.run.ddp.gather import job_epoch
from wif.run.loop import TimedFeed, samples_in
from wif.watcher import claim, proof, ranks, served
from wif.watcher.claim import State
from wif.watcher.found import anchor_of, batch_size_of, find_dataloader, length_of, settings_of
from wif.watcher.options import WatchOptions, line, silent, to_stderr, warn
from wif.watcher.orders import Orders
from wif.watcher.record import Record, device
from wif.watcher.windows import Opened, Window, as_the_script, epoch_start, script_share, stream, watched_alone


class Session:
    """One watched loop over the whole script: its epochs and its one MLflow run.

    Its epochs are numbered on across `wif.watch` calls and new wrappers. The run and its sampler open at the first
    epoch. See NOTE [ The watch's states ] in wif.watcher.claim.
    """

    def __init__(self, batches: Iterable[Any], options: WatchOptions) -> None:
        self._anchor, self.options = claim.weak(anchor_of(batches)), options  # NOTE [ One loop, one session ]
        self.ordered, self.claims = options.ordered, options.claims or options.ordered
        under_torchrun = os.environ.get("RANK", "0") != "0"  # one line an epoch, rank 0's
        self.say = silent if options.quiet or under_torchrun else to_stderr
        found = find_dataloader(batches)
        loader = found.loader if found else None
        self._loader = claim.weak(loader)  # held weakly: a DataLoader made anew each epoch goes when done
        size = batch_size_of(loader) if loader is not None else getattr(batches, "batch_size", None)
        self.batch_size = int(size or 1)  # a batch with no tensor of a batch dimension counts as this many
        self.params = settings_of(batches, loader)
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
        self.ended_at: Optional[float] = None  # time.monotonic() at its last epoch's end, its figures sent
        self.alone = watched_alone()  # the windows without orders
        self.span = self.alone.seconds  # a ranked session's windows: this long at rank 0's pace
        self.current: Optional[Iterator[Any]] = None
        self.proven = not options.claims  # a loader the script handed wif.watch is its own proof
        self.pending: List[Tuple[Dict[str, float], bool, bool]] = []  # windows held until the claim is proven
        self.steps_at, self.open = 0, False
        self.iterated: Optional[Any] = None

    @property
    def anchor(self) -> Any:
        """What keeps the session (wif.watcher.found), while it lives; None once collected."""
        return self._anchor()

    @property
    def loader(self) -> Optional[DataLoader]:
        """The DataLoader the session was made with, while it lives."""
        return self._loader()

    # ------------------------------------------------------------------ the record
    def open_record(self) -> None:
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
        if not self.proven:
            atexit.register(claim.stand, self)  # after the Record's own: it runs first
        if self.record.log and self.record.own and "MLFLOW_TRACKING_URI" not in os.environ:
            where = os.path.abspath("mlflow.db")
            self.say(f"wif.watch: logging to {where} (or MLFLOW_TRACKING_URI; nowhere: WIF_WATCH=print)")

    # ------------------------------------------------------------------ an epoch
    def epoch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """One pass over `batches`, this epoch's iterable: the batches as they come, timed.

        Under orders, as the measurement asks (wif.watcher.orders). A measurement whose last epoch the loop
        left early, by a break, islice or zip, ends here at the next epoch's start.
        """
        if not claim.settle(self, batches):
            yield from batches
            return
        self.steps_at, orders = claim.steps_seen(), self.orders
        if orders is None:
            yield from self._timed(batches, offers=length_of(batches))
            return
        if self.state is State.PROBING:  # its first batches timed, and the script ends once the claim is proven
            yield from orders.sample(self._started(batches), proven=self.stepped)
            return
        if orders.mode == "loader_only" and not self.proven:  # the loader alone once a step proved it trains
            if not (yield from self._until_stepped(batches)):
                return
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
                # the next candidate's in this process: NOTE [ Trials in one process ] in wif.watcher.served
                orders = self.orders = served.next_orders(orders, self.record, batches)
                self.epochs = []
                self.open_record()

    def _until_stepped(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The script's own batches until its first step proves the claim; returns whether one did.

        The loader-only trials then start at once: a script of one epoch or a stream has no second one.
        """
        own = self._started(batches)
        for batch in own:
            yield batch
            if self.stepped():
                own.close()  # the script's own iterator, and its workers, are let go
                self.publish()
                return True
        if self.stepped():
            self.publish()
        return False

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
        """The epoch's batches of `source`, timed window by window, to the end or the window where the orders are done.

        `offers`: the script's epoch's own length, before any cut. See NOTE [ Windows ] in wif.watcher.windows.
        """
        alone = self.orders is not None and self.orders.mode == "loader_only"  # no script runs between its epochs
        if self.ended_at is not None and not alone:  # the script's own time since its last epoch: evaluation, saving
            self.record.between(time.monotonic() - self.ended_at)
        self.handed, self.expected, self.starting = 0, length_of(source), True
        self.epoch_index, self.own, self.start_s = self.epoch_index + 1, offers, 0.0
        proof.STARTED.clear()  # the DataLoader epochs this one begins, noted from here
        batches, first, ended = stream(source), True, False
        self.open = True
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
        finally:  # what the script's epochs offer, for a measurement that ran out (wif.advisor.script.runner)
            self.open = False
            self.record.offered(offers if ended and offers is not None else self.handed)
            self.record.send_held()  # no window follows at once: what the windows held back goes out
            self.ended_at = time.monotonic()

    def _window(self, window: Window, first: bool) -> Iterator[Any]:
        """One window's batches, timed by the loop's clock, the orders proven at the epoch's first batch."""
        feed = TimedFeed(window, lambda b: b, count=lambda b: samples_in(b, self.batch_size))
        self.record.begin(follows=not first)
        proving, proven = first and self.orders is not None and self.orders.promise is not None, True
        handed, complete = self.handed, False
        copied = self.orders.copies.s if self.orders is not None else 0.0
        synchronize(device())  # sync point: nothing from before is counted in this window
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
        """The window's end, however its pass ended: its figures from `feed`, recorded (NOTE [ A window times ... ]).

        `complete`: the loop took every batch of it; `closed`: its count or clock closed it, the next may follow.
        """
        synchronize(device())  # sync point: the window's queued work is done (CUDA may have started in it)
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
            if not self.warned:  # the first epoch that could not be recorded is said, no later one
                self.warned = True
                warn(f"an epoch could not be recorded ({type(err).__name__}: {err}); your training goes on")

    def taken(self) -> bool:
        """Whether a hooked epoch is open with every batch handed out: Lightning's fetcher never asks for the end."""
        return self.current is not None and self.expected is not None and self.handed >= self.expected

    def _end(self, stats: Any, batches: int, *, complete: bool, whole: bool, raw: Dict, follows: bool) -> None:
        """The window's figures recorded, logged, said and handed on; the PSS read waits where the next `follows`."""
        # The step is the time between batches, whatever it synchronizes: the loop copies nothing of its own.
        step = replace(stats, copy_s=0.0, compute_s=max(stats.epoch_time_s - stats.data_wait_s, 0.0))
        e = {**figures(asdict(step)), "samples": stats.samples, "batches": batches}
        e.update({names.SCRIPT_EPOCH: self.epoch_index, names.WINDOWED: float(not whole), **raw})
        if self.ranked:  # the job's epoch: its slowest rank's, each rank's beside it
            rows = ranks.gather({**asdict(step), "samples": stats.samples, "batches": batches})
            if self.orders is None:  # every rank's next windows close at the same batch, at rank 0's pace
                self.alone = replace(self.alone, batches=ranks.count_for(rows, self.span))
            job = job_epoch(rows)
            e.update(figures(job), samples=job["samples"])
            e[names.COMPUTE_THREADS] = stats.compute_threads
            e.update({k: v for k, v in job.items() if k.startswith("rank") or k == "slowest_rank"})
        e.update(self.record.end(stats.t_start, device(), pss=not follows))
        self.pending.append((e, complete, follows and self.orders is not None))
        if self.proven or self.stepped():
            self.publish()

    def stepped(self) -> bool:
        """Whether the training took a step since this epoch began: the claim is proven."""
        return self.proven or claim.steps_seen() > self.steps_at

    def publish(self) -> None:
        """The claim stands: the held windows recorded, logged, said and handed to the orders, in turn."""
        if not self.proven:
            self.proven = True
            claim.disarm()
        held, self.pending = self.pending, []
        for e, complete, hold in held:
            e["epoch"] = len(self.epochs)
            self.epochs.append(e)
            self.record.log_epoch(e, self.epochs, hold=hold)
            self.say(line(e, complete))
            if self.orders is not None:
                self.orders.after_epoch(self.epochs, self.record, self.ranked)
