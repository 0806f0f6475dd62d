"""The supervisor's record of one forked run, fed by `wif.run.supervise`: MLflow, progress, stopping, the summary.

It opens once the run has built its data, and logs each message the run sends through the pipe.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from wif.config import Config, TrainerConfig
from wif.measure import epochs, names
from wif.measure.contention import HostCpuMeter, is_contended
from wif.measure.epochs import figures
from wif.measure.lifetime import signals_held
from wif.measure.sampler import TreeSampler
from wif.measure.tracking import Tracker
from wif.run.noise import Between
from wif.run.stopping import GO_ON, STOP, Decision, StopRule, decide, out_of_time

log = logging.getLogger("wif")
# The peaks trainer.epochs=auto waits on to stop rising: the tree's RSS, NVML's device memory, torch's own peaks.
MEMORY_PEAKS = (
    names.RAM_PEAK_RSS_MB,
    names.VRAM_PEAK_DEVICE_MB,
    names.VRAM_PEAK_ALLOCATED_MB,
    names.VRAM_PEAK_RESERVED_MB,
)
# An epoch's storage and decoding figures, logged where the run measured them (docs/formats.md, docs/transfers.md)
READ_FIGURES = (
    names.STORAGE_READ_BYTES,
    names.PAGE_CACHE_RESIDENT_FRAC,
    names.PAGE_CACHE_COLD,
    names.MINOR_FAULTS,
    names.DECODE_SLOW_PATH_IMAGES,
)


def stop_rule(tr: TrainerConfig, between: Optional[Between] = None) -> StopRule:
    """The run's stopping rule; `between`: its cell's between-run noise, for auto_target=auto."""
    return StopRule(
        warmup=tr.warmup_epochs,
        min_epochs=tr.min_epochs,
        max_epochs=tr.max_epochs,
        target=None if tr.auto_target == "auto" else float(tr.auto_target),
        confidence=tr.auto_confidence,
        memory_window=tr.memory_window,
        memory_tolerance=tr.memory_tolerance,
        between=between,
    )


@dataclass
class RunRecord:
    """One run as its supervisor sees it: the messages the run sent, and what was made of them."""

    conf: Config
    tracker: Tracker
    open_run: Callable[[], str]  # creates the MLflow run: called once the run's process has built its data
    label: str
    sampler: TreeSampler
    meter: HostCpuMeter
    run_id: Optional[str] = None
    pending: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)  # what came before the run existed
    epochs: List[Dict[str, Any]] = field(default_factory=list)
    final: Dict[str, float] = field(default_factory=dict)
    error: Optional[Dict[str, Any]] = None
    done: bool = False
    decision: Optional[Decision] = None  # the last answer of the stopping rule (trainer.epochs=auto)
    rule: Optional[StopRule] = None  # trainer.epochs=auto: the rule, its between-run noise read before the run
    t_spawn: float = 0.0  # time.monotonic() when the run's process started: its start cost is counted from here

    def open(self) -> str:
        """The MLflow run, opened on first need, with what the run said before it existed."""
        if self.run_id is None:
            with signals_held():  # scancel's SIGTERM while the record is made: one record all the same
                self.run_id = self.open_run()
            for kind, p in self.pending:
                self.on_message(kind, p)
            self.pending.clear()
        return self.run_id

    def on_message(self, kind: str, p: Dict[str, Any]) -> None:
        """Take one message of the run; what comes before its data waits for the record to exist."""
        if self.run_id is None and kind not in ("rank", "error"):
            if kind != "data":  # the device and the run's first tags wait for the record
                self.pending.append((kind, p))
                return
            self.open()  # the data is built (a user's factory called once, and checked): the record is opened
        handle = {
            "device": self._on_device,
            "data": self._on_data,
            "tags": lambda p: self.tracker.set_tags(self.run_id, p),
            "setup": self.final.update,  # setup_s, and compile_s with trainer.compile=true
            "epoch": self._on_epoch,
            "result": self._on_result,
            "error": self._on_error,
            # trainer.nproc>1 with measure.rank_indices: each rank's samples
            "artifact": lambda p: self.tracker.client.log_dict(self.run_id, p["data"], p["name"]),
            # trainer.nproc>1: each rank's process and GPU, for its workers and VRAM
            "rank": lambda p: self.sampler.add_rank(p["rank"], p["pid"], p["uuid"]),
        }.get(kind)
        if handle is not None:
            handle(p)

    def _on_device(self, p: Dict[str, Any]) -> None:
        tags = {names.TAG_GPU: p["name"]}
        if p["type"] == "cuda":
            self.sampler.attach_gpu(p["uuid"])
            tags.update(
                {
                    names.TAG_GPU_UUID: p["uuid"],
                    names.TAG_CUDA: p["cuda"],
                    names.TAG_GPU_CAPABILITY: p["capability"],
                    names.TAG_GPU_DRIVER: self.sampler.gpu.driver if self.sampler.gpu else "unknown",
                }
            )
        self.tracker.set_tags(self.run_id, tags)

    def _on_data(self, p: Dict[str, Any]) -> None:
        self.final[names.DATA_LOAD_S] = p[names.DATA_LOAD_S]
        self.tracker.set_tags(self.run_id, {f"wif.n_{k}": p[k] for k in ("train", "val", "test")})

    def _on_result(self, p: Dict[str, Any]) -> None:
        self.final.update(p)
        self.done = True

    def _on_error(self, p: Dict[str, Any]) -> None:
        self.error = p

    def _on_epoch(self, p: Dict[str, Any]) -> None:
        self.meter.mark()  # the run waits for its ack from here on: nothing of this lands in an epoch
        m = self._epoch_metrics(p)
        self.sampler.poke()
        memory = {
            k: v for k, v in self.sampler.samples.peaks(p["t_start"], time.monotonic()).items() if k in MEMORY_PEAKS
        }
        memory.update({k: p[k] for k in MEMORY_PEAKS if k in p})  # torch's own VRAM peaks, from the run
        self.epochs.append({**p, **m, "memory": memory})
        self.tracker.log_metrics(self.run_id, m, step=p["epoch"])
        if self.conf.trainer.auto:
            self.decision = decide(
                [e[names.EPOCH_TIME_S] for e in self.epochs],
                {k: [e["memory"].get(k, 0.0) for e in self.epochs] for k in memory},
                self.rule or stop_rule(self.conf.trainer),
                start_cost=self.start_cost(),
            )
            self.decision = self.within_deadline(self.decision, epoch_s=time.monotonic() - p["t_start"])
        if self.conf.progress:
            log.info(self.progress_line(p, m))
        if self.decision is not None and self.decision.stop:
            log.info("%s  stops: %s", self.label, self.decision.reason)

    def _epoch_metrics(self, p: Dict[str, Any]) -> Dict[str, Any]:
        """The metrics an epoch logs: its figures, the others' CPU share, and the tree's CPU means."""
        m = {
            **figures(p),
            names.TRAIN_LOSS: p[names.TRAIN_LOSS],
            names.VAL_LOSS: p.get(names.VAL_LOSS),
            names.VAL_ACC: p.get(names.VAL_ACC),
            names.VAL_TIME_S: p.get(names.VAL_TIME_S),
            **self.meter.others(-2, -1),
            names.TREE_CPU_S: self.meter.tree_s(-2, -1),
        }
        m.update({k: p[k] for k in READ_FIGURES if k in p})
        m[names.COPY_BYTES_PER_EPOCH] = p.get(names.COPY_BYTES_PER_EPOCH)  # host-to-device bytes (None: not logged)
        m.update({k: v for k, v in p.items() if k.startswith("rank") or k == "slowest_rank"})  # trainer.nproc>1
        m.update(self.sampler.samples.means(p["t_start"], p["t_end"]))
        return m

    def progress_line(self, p: Dict[str, Any], m: Dict[str, Any]) -> str:
        """The epoch's progress line: its time, throughput and data wait, and the stopping rule's state."""
        tr = self.conf.trainer
        val = f"  val_acc {m[names.VAL_ACC]:.3f}" if m[names.VAL_ACC] is not None else ""  # none in loader-only mode
        d = self.decision
        pin = "" if d is None or d.half_width is None else f"  median +/- {100 * d.half_width:.1f}%"
        pin += f" (target {100 * d.target:.1f}%)" if pin and d.target is not None else ""
        pin += f"  memory rising: {', '.join(d.growing)}" if d is not None and d.growing else ""
        total = f"auto<={tr.max_epochs}" if tr.auto else tr.epochs
        return (
            f"{self.label}  epoch {int(p['epoch']) + 1}/{total}  {m[names.EPOCH_TIME_S]:.2f} s  "
            f"{m[names.THROUGHPUT_IMG_S]:.0f} img/s  data wait {100 * m['data_wait_share']:.0f}%"
            f"{val}{pin}{self.contention_note(m)}"
        )

    def within_deadline(self, decision: Decision, epoch_s: float) -> Decision:
        """The decision, or a stop where the job's deadline (sweep.deadline) comes before another epoch."""
        deadline = self.conf.sweep.deadline
        if decision.stop or deadline is None:
            return decision
        why = out_of_time(
            len(self.epochs), self.conf.trainer.warmup_epochs, epoch_s=epoch_s, left_s=deadline - time.time()
        )
        return decision if why is None else replace(decision, stop=True, reason=why)

    def start_cost(self) -> Optional[float]:
        """The run's start (fork, data, model, warm-up) in steady epochs, each counted start to start."""
        starts = [e["t_start"] for e in self.epochs[self.conf.trainer.warmup_epochs :]]
        per_epoch = statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else 0.0
        return (starts[0] - self.t_spawn) / per_epoch if per_epoch > 0 and self.t_spawn else None

    def answer(self) -> str:
        """What the run hears after an epoch: STOP once the stopping rule says so."""
        return STOP if self.decision is not None and self.decision.stop else GO_ON

    def stop_reason(self) -> str:
        """Why the run stopped, in one line: its tag wif.stop_reason."""
        tr = self.conf.trainer
        if not tr.auto:
            return f"trainer.epochs={tr.epochs} (fixed)"
        return self.decision.reason if self.decision is not None and self.decision.stop else "the run ended early"

    def contention_note(self, m: Dict[str, Any]) -> str:
        """What the progress line says when other processes took a share of the idle cores above the threshold."""
        if not is_contended(m, self.conf.measure.contended_pct):
            return ""
        return f"  CONTENDED: other processes used {m[names.HOST_OTHER_CPU_PCT]:.0f}% of a core"

    def summary(self, t_end: float) -> Dict[str, float]:
        """The run's steady summary (wif.measure.epochs), with what only the harness knows."""
        out = {**self.final, **epochs.summary(self.epochs, self.conf.trainer.warmup_epochs)}
        val = sum(e[names.VAL_TIME_S] or 0.0 for e in self.epochs)
        out[names.TIME_TOTAL_S] = (
            sum(e[names.EPOCH_TIME_S] for e in self.epochs) + val + self.final.get(names.TEST_TIME_S, 0.0)
        )
        if any(e[names.VAL_TIME_S] is not None for e in self.epochs):
            out[names.VAL_TIME_TOTAL_S] = val
        if self.decision is not None and self.decision.half_width is not None:
            out["epoch_time_median_ci_rel"] = self.decision.half_width  # the steady figure's relative half-width
        out.update(self.sampler.samples.peaks(self.epochs[0]["t_start"], t_end))
        # others' CPU over the measured epochs, from the mark that ended the warm-up to the last, and idle cores
        first = epochs.left_out(len(self.epochs), self.conf.trainer.warmup_epochs)
        out.update(self.meter.others(first, len(self.epochs)))
        return out
