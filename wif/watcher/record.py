"""What `wif.watch` records beside the clock, read only at epoch boundaries, and the MLflow run it goes to.

It records the CPU seconds of the process and its workers, and others' share of the cores. The tree's memory
comes from the study's `TreeSampler`, a thread here. It reads RSS every 0.1 s, and PSS within a share of a
core (measure.pss_budget_pct) and at each epoch's end. Where the script uses CUDA, the VRAM peaks are read too.

The run opens after the first epoch, so importing MLflow lands in no epoch. Tagged `wif.kind=watch` and with
its owner's pid, a run left RUNNING by a killed script is found as the study's orphans are. It ends FINISHED
at exit, FAILED on an uncaught exception, KILLED on Ctrl-C. wif-advise ends the runs it opened itself.
"""

from __future__ import annotations

import atexit
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

import torch

from wif.config import ConfigError, MeasureConfig, TrackingConfig
from wif.measure import epochs, names
from wif.measure.contention import HostCpuMeter
from wif.measure.epochs import WARMUP_EPOCHS
from wif.measure.lifetime import owner_tags
from wif.measure.sampler import TreeSampler
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import (
    FAILED,
    FINISHED,
    KILLED,
    PacedSender,
    Tracker,
    check_server_answers,
    default_tracking_uri,
)
from wif.watcher import ranks
from wif.watcher.options import warn
from wif.watcher.orders import FORKED_FROM
from wif.watcher.origin import redacted

MB = 1024 * 1024
ANSWER_WITHIN_S = 5.0  # the watch waits for a tracking server in the user's loop, or at the script's exit


# Kept over the run's epochs as the largest any epoch saw.
PEAKS = (
    names.RAM_PEAK_RSS_MB,
    names.RAM_PEAK_PSS_MB,
    names.RAM_PEAK_USS_MB,
    "workers_peak",
    names.VRAM_PEAK_DEVICE_MB,
    names.VRAM_PEAK_ALLOCATED_MB,
    names.VRAM_PEAK_RESERVED_MB,
)


class Record:
    """The watched loader's figures beyond its clock, and its MLflow run.

    Args:
        params: the loader's settings, the run's params.
        experiment: the MLflow experiment; None for MLFLOW_EXPERIMENT_NAME or the study's.
        run_name: the run's name; None for "watch SCRIPT".
        log: whether anything goes to MLflow.
        orders: wif-advise's orders, whose run and store the figures go to; None without.
    """

    def __init__(
        self, params: Dict[str, Any], experiment: Optional[str], run_name: Optional[str], log: bool, orders: Any = None
    ) -> None:
        self.params, self.run_name, self.log = params, run_name, log
        self.experiment = _experiment(experiment, orders)
        self.uri = orders.uri if orders is not None else default_tracking_uri()
        self.run_id: Optional[str] = orders.run_id if orders is not None else None
        self.own = self.run_id is None  # the watch ends only the run it opened
        self.tracker: Optional[Tracker] = None
        self.epochs: List[Dict[str, float]] = []
        self.sender: Optional[PacedSender] = None  # the epochs' figures on their way to MLflow
        self.held: List[Dict[str, float]] = []  # windows logged once no window follows at once (`send_held`)
        self.stream = False  # an epoch of the script had no length: NOTE [ A window times the script's own run ]
        self.tagged: Dict[str, Any] = {}
        self.poke_s = 0.0  # what the last epoch-end PSS read cost the user's loop
        self.status = FINISHED
        if self.log and self.own:
            host_tags()  # its git subprocesses before the sampler starts: not a worker, not the run's RAM
        forked_from = os.environ.get(FORKED_FROM)  # started warm: the pages shared with the server count in full
        # windows that follow at once read no PSS at their ends: past the budget until a read holds with workers
        self.sampler = TreeSampler(
            os.getpid(), MeasureConfig(), forked_from=int(forked_from) if forked_from else None, unread_reads=3
        )
        self.sampler.start()
        self.meter = HostCpuMeter(os.getpid(), job_pid=ranks.job_root())  # a sibling rank is no other
        self.gpu_attached = False
        self.finished = False
        self.script_epochs, self.script_batches = 0, 0  # what the script's epochs offered, uncut
        self.gaps: List[float] = []  # the script's own time between its epochs
        self.stop_reason = "the script's own epochs"
        atexit.register(self.finish)
        self._excepthook = sys.excepthook
        self.error = ""
        sys.excepthook = self._uncaught

    def _uncaught(self, kind: type, value: BaseException, tb: Any) -> None:
        """An exception that ends the script: the run ends FAILED, or KILLED on Ctrl-C."""
        self.status = KILLED if issubclass(kind, KeyboardInterrupt) else FAILED
        self.error = f"{kind.__name__}: {value}"
        self._excepthook(kind, value, tb)

    def begin(self, follows: bool = False) -> None:
        """A window starts: the CPU meter marks it. One that `follows` the last at once shares its end's mark."""
        if follows and self.meter.marks:
            self.meter.marks.append(self.meter.marks[-1])
        else:
            self.meter.mark()

    def drop(self) -> None:
        """The window begun last is no figure: its mark is dropped."""
        self.meter.marks.pop()

    def between(self, seconds: float) -> None:
        """The script spent `seconds` between two epochs of its training loader: evaluation, saving, logging."""
        self.gaps.append(seconds)

    def offered(self, batches: int) -> None:
        """An epoch of the script ended, having offered `batches` batches (wif.advisor.script.runner reads them)."""
        self.script_epochs += 1
        self.script_batches += batches

    def end(self, t_start: float, device: torch.device, pss: bool = True) -> Dict[str, float]:
        """The epoch's figures beside its clock, read after it ended.

        With `pss`, the tree's PSS is read once more here, where that costs at most 1% of the epoch. Shorter
        epochs, and a window the next follows at once, get the sampler's own budgeted reads.
        """
        self.meter.mark()
        out: Dict[str, float] = {names.TREE_CPU_S: self.meter.tree_s(-2, -1)}
        out.update(self.meter.others(-2, -1))
        if device.type == "cuda":
            self._attach(device)
            out[names.VRAM_PEAK_ALLOCATED_MB] = torch.cuda.max_memory_allocated(device) / MB
            out[names.VRAM_PEAK_RESERVED_MB] = torch.cuda.max_memory_reserved(device) / MB
        now = time.monotonic()
        if pss and now - t_start >= 100 * self.poke_s:  # a PSS read, ~17 ms with torch, costs 1% of the epoch at most
            self.sampler.poke()
            self.poke_s, now = time.monotonic() - now, time.monotonic()
        elif not pss:  # the tree listed and its RSS read, a few ms: the window's workers are counted
            self.sampler.poke(slow=False)
            now = time.monotonic()
        out.update(self.sampler.samples.means(t_start, now))
        out.update(self.sampler.samples.peaks(t_start, now))
        return out

    def _attach(self, device: torch.device) -> None:
        """NVML's device memory read beside torch's peaks, from the first CUDA epoch on."""
        if self.gpu_attached:
            return
        self.gpu_attached = True
        try:
            self.sampler.attach_gpu(str(torch.cuda.get_device_properties(device).uuid))
        except Exception:  # noqa: BLE001 - no NVML here: torch's own peaks still stand
            pass

    def open(self) -> Optional[str]:
        """The MLflow run's id, the run opened on first need, after the first epoch; None where nothing is logged.

        A store that cannot be opened or written is said in one line, and the figures go unlogged: it never ends
        the training. Under wif-advise's orders the run is wif-advise's, and its failure ends the measurement.
        """
        if not self.log:
            return None
        try:
            return self._open()
        except Exception as err:  # noqa: BLE001 - MLflow's and SQLAlchemy's errors, a bad URI, a full disk
            if self.own is False:
                raise
            self.store_failed(err)
            return None

    def store_failed(self, err: BaseException) -> None:
        """Stops logging, said in one line: the store cannot be written."""
        if self.log:
            self.log = False
            why = f"{type(err).__name__}: {str(err)[:300]}"
            said = "the figures are not logged and your training goes on"
            warn(f"the MLflow store {self.uri} cannot be written ({why}); {said}")

    def _open(self) -> Optional[str]:
        """The run, started in the store the first time."""
        if self.tracker is None:
            self.tracker = Tracker(self.uri, self.experiment, attempts=2, answer_within_s=ANSWER_WITHIN_S)
            if self.run_id is None:
                tags = {
                    **host_tags(),
                    **owner_tags(),
                    names.TAG_KIND: "watch",
                    names.TAG_DEVICE: device().type,
                    names.TAG_SCRIPT: " ".join(redacted(sys.argv))[:4000],
                }
                self.run_id = self.tracker.start_run(
                    self.run_name or f"watch {os.path.basename(sys.argv[0])}", self.params, tags, self.params
                )
        return self.run_id

    def log_epoch(self, e: Dict[str, float], epochs: List[Dict[str, float]], hold: bool = False) -> None:
        """The epoch `e` on its way to MLflow, with the tags that changed; `epochs` kept for the summary.

        With `hold`, it waits for `send_held`: the next window follows at once (NOTE [ A window times the
        script's own run ] in wif.watcher.windows).
        """
        self.epochs = epochs
        self.held.append(e)
        if not hold:
            self.send_held()

    def send_held(self) -> None:
        """The epochs held so far on their way to MLflow: at an epoch's end, the measurement's, or the script's."""
        held, self.held = self.held, []
        run = self.open() if held else None
        for e in held if run is not None else []:
            tags = {names.TAG_N_TRAIN: int(e["samples"]), names.TAG_TORCH_THREADS: torch.get_num_threads()}
            fresh = {k: v for k, v in tags.items() if self.tagged.get(k) != v}
            self.tagged.update(fresh)
            if self.sender is None:  # the user's next epoch starts at once; sending takes 1% of a core at most
                self.sender = PacedSender(self.tracker, run)
            self.sender.put(int(e["epoch"]), {k: v for k, v in e.items() if k != "epoch"}, fresh)

    def _flush(self) -> None:
        """The epochs still on their way sent; one that could not be is said."""
        if self.sender is not None and self.sender.close():
            warn(f"an epoch's figures did not reach MLflow: {self.sender.error}")

    def _still_answers(self, run: str) -> bool:
        """Whether the store is still there: a server gone since the run opened would hold the exit for minutes."""
        try:
            check_server_answers(self.uri, ANSWER_WITHIN_S)
            return True
        except ConfigError:
            self.log = False
            said = f"the last epochs are not logged, and run {run} stays RUNNING"
            warn(f"the tracking server {self.uri} stopped answering: {said}")
            return False

    def summary(self) -> Dict[str, float]:
        """The run's summary over the steady epochs, the first left out where there are more, as a study run's."""
        out = epochs.summary(self.epochs, WARMUP_EPOCHS)
        marks = len(self.meter.marks)  # the meter marks each epoch's start and end
        steady_from = 2 * epochs.left_out(len(self.epochs), WARMUP_EPOCHS)
        if marks > 1:
            out.update(self.meter.others(steady_from, marks - 1))  # others' CPU over the steady epochs
        for key in PEAKS:
            values = [e[key] for e in self.epochs if key in e]
            if values:
                out[key] = max(values)
        return out

    def finish(self) -> None:
        """At the script's exit, or once its loop is gone: the summary logged; the run ended if the watch opened it."""
        if self.finished:
            return
        self.finished = True
        self.sampler.stop()
        self.send_held()
        run = self.open() if self.epochs else None
        if run is None or not self._still_answers(run):
            return
        self._flush()
        try:
            offered = {names.SCRIPT_EPOCHS: self.script_epochs, names.SCRIPT_BATCHES: self.script_batches}
            offered.update({names.SCRIPT_STREAM: 1.0} if self.stream else {})
            offered.update({names.BETWEEN_EPOCHS_S: statistics.median(self.gaps)} if self.gaps else {})
            self.tracker.log_metrics(
                run, {**self.summary(), **offered, names.SAMPLER_CPU_PCT: self.sampler.own_cost_pct()}
            )
            error = {names.TAG_ERROR: self.error[:4000]} if self.error else {}
            self.tracker.set_tags(run, {names.TAG_STOP_REASON: self.stop_reason, **error})
            if self.own:
                self.tracker.end_run(run, self.status)
        except Exception as err:  # noqa: BLE001 - at the script's exit: one line, never a traceback
            if not self.own:
                raise
            self.store_failed(err)


def _experiment(experiment: Optional[str], orders: Any) -> str:
    """The run's experiment: the orders', else the one asked, MLFLOW_EXPERIMENT_NAME, or the study's."""
    if orders is not None:
        return orders.spec["experiment"]
    return experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or TrackingConfig.experiment


def device() -> torch.device:
    """The device the script computes on: CUDA where it has started it (the watch never starts it)."""
    if torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
