"""The supervisor's record of one forked run: each message the run sends through the pipe, logged to MLflow
(the record opened once the run has built its data), the progress line, the stopping rule's answer after
each epoch under trainer.epochs=auto, and the run's summary. `wif.run.supervise` forks the run and feeds it.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from wif.config import Config, TrainerConfig
from wif.measure import epochs
from wif.measure.contention import HostCpuMeter, is_contended
from wif.measure.epochs import figures
from wif.measure.lifetime import signals_held
from wif.measure.sampler import TreeSampler
from wif.measure.tracking import Tracker
from wif.run.stopping import GO_ON, STOP, Between, Decision, StopRule, decide

log = logging.getLogger("wif")
# The memory peaks trainer.epochs=auto waits on: summed RSS of the run's tree (sampled from outside), device
# memory from NVML, and torch's allocator peaks (sent by the run). Each must stop rising before a run stops.
MEMORY_PEAKS = ("ram_peak_rss_mb", "vram_peak_device_mb", "vram_peak_allocated_mb", "vram_peak_reserved_mb")


def stop_rule(tr: TrainerConfig, between: Optional[Between] = None) -> StopRule:
    """The run's stopping rule; `between`: its cell's between-run noise, for auto_target=auto."""
    target = None if tr.auto_target == "auto" else float(tr.auto_target)
    return StopRule(
        tr.warmup_epochs,
        tr.min_epochs,
        tr.max_epochs,
        target,
        tr.auto_confidence,
        tr.memory_window,
        tr.memory_tolerance,
        between,
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
        if self.run_id is None and kind not in ("rank", "error"):
            if kind != "data":  # the device and the run's first tags wait for the record
                self.pending.append((kind, p))
                return
            self.open()  # the data is built (a user's factory called once, and checked): the record is opened
        if kind == "device":
            tags = {"wif.gpu": p["name"]}
            if p["type"] == "cuda":
                self.sampler.attach_gpu(p["uuid"])
                tags.update(
                    {
                        "wif.gpu_uuid": p["uuid"],
                        "wif.cuda": p["cuda"],
                        "wif.gpu_capability": p["capability"],
                        "wif.gpu_driver": self.sampler.gpu.driver if self.sampler.gpu else "unknown",
                    }
                )
            self.tracker.set_tags(self.run_id, tags)
        elif kind == "data":
            self.final["data_load_s"] = p["data_load_s"]
            self.tracker.set_tags(self.run_id, {f"wif.n_{k}": p[k] for k in ("train", "val", "test")})
        elif kind == "tags":
            self.tracker.set_tags(self.run_id, p)
        elif kind == "setup":  # setup_s, and compile_s with trainer.compile=true
            self.final.update(p)
        elif kind == "epoch":
            self._on_epoch(p)
        elif kind == "result":
            self.final.update(p)
            self.done = True
        elif kind == "error":
            self.error = p
        elif kind == "artifact":  # trainer.nproc>1 with measure.rank_indices: each rank's samples
            self.tracker.client.log_dict(self.run_id, p["data"], p["name"])
        elif kind == "rank":  # trainer.nproc>1: each rank's process and GPU, for its workers and VRAM
            self.sampler.add_rank(p["rank"], p["pid"], p["uuid"])

    def _on_epoch(self, p: Dict[str, Any]) -> None:
        self.meter.mark()  # the run waits for its ack from here on: nothing of this lands in an epoch
        m = {
            **figures(p),
            "train_loss": p["train_loss"],
            "val_loss": p.get("val_loss"),
            "val_acc": p.get("val_acc"),
            "val_time_s": p.get("val_time_s"),
            "host_other_cpu_pct": self.meter.other_pct(-2, -1),
            "tree_cpu_s": self.meter.tree_s(-2, -1),
        }
        m.update(
            {
                k: p[k]
                for k in (
                    "storage_read_bytes",
                    "page_cache_resident_frac",
                    "page_cache_cold",
                    "minor_faults",
                    "decode_slow_path_images",
                )
                if k in p
            }
        )  # docs/formats.md, docs/transfers.md
        m["copy_bytes_per_epoch"] = p.get("copy_bytes_per_epoch")  # host-to-device bytes (None is not logged)
        m.update({k: v for k, v in p.items() if k.startswith("rank") or k == "slowest_rank"})  # trainer.nproc>1
        m.update(self.sampler.epoch_means(p["t_start"], p["t_end"]))
        self.sampler.poke()
        memory = {k: v for k, v in self.sampler.peaks(p["t_start"], time.monotonic()).items() if k in MEMORY_PEAKS}
        memory.update({k: p[k] for k in MEMORY_PEAKS if k in p})  # torch's own VRAM peaks, from the run
        self.epochs.append({**p, **m, "memory": memory})
        self.tracker.log_metrics(self.run_id, m, step=p["epoch"])
        tr = self.conf.trainer
        if tr.auto:
            self.decision = decide(
                [e["epoch_time_s"] for e in self.epochs],
                {k: [e["memory"].get(k, 0.0) for e in self.epochs] for k in memory},
                self.rule or stop_rule(tr),
                self.start_cost(),
            )
        if self.conf.progress:
            val = f"  val_acc {m['val_acc']:.3f}" if m["val_acc"] is not None else ""  # none in loader-only mode
            d = self.decision
            pin = "" if d is None or d.half_width is None else f"  median +/- {100 * d.half_width:.1f}%"
            pin += f" (target {100 * d.target:.1f}%)" if pin and d.target is not None else ""
            pin += f"  memory rising: {', '.join(d.growing)}" if d is not None and d.growing else ""
            log.info(
                "%s  epoch %d/%s  %.2f s  %.0f img/s  data wait %.0f%%%s%s%s",
                self.label,
                p["epoch"] + 1,
                f"auto<={tr.max_epochs}" if tr.auto else tr.epochs,
                m["epoch_time_s"],
                m["throughput_img_s"],
                100 * m["data_wait_share"],
                val,
                pin,
                self.contention_note(m["host_other_cpu_pct"]),
            )
        if self.decision is not None and self.decision.stop:
            log.info("%s  stops: %s", self.label, self.decision.reason)

    def start_cost(self) -> Optional[float]:
        """The run's start (fork, data, model, warm-up epochs) in steady epochs, each counted start to start
        (validation and logging included): Kalibera and Jones' cost of a run against an epoch's."""
        starts = [e["t_start"] for e in self.epochs[self.conf.trainer.warmup_epochs :]]
        per_epoch = statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else 0.0
        return (starts[0] - self.t_spawn) / per_epoch if per_epoch > 0 and self.t_spawn else None

    def answer(self) -> str:
        """What the run hears after an epoch: STOP once the stopping rule says so."""
        return STOP if self.decision is not None and self.decision.stop else GO_ON

    def stop_reason(self) -> str:
        tr = self.conf.trainer
        if not tr.auto:
            return f"trainer.epochs={tr.epochs} (fixed)"
        return self.decision.reason if self.decision is not None and self.decision.stop else "the run ended early"

    def contention_note(self, other_pct: Optional[float]) -> str:
        """What the progress line says when other processes took a share of the cores above the threshold."""
        if not is_contended(other_pct, self.conf.measure.contended_pct):
            return ""
        return f"  CONTENDED: other processes used {other_pct:.0f}% of a core"

    def measured_other_cpu_pct(self) -> Optional[float]:
        """Others' CPU share over the measured epochs: from the mark that ended the warm-up to the last."""
        return self.meter.other_pct(
            epochs.left_out(len(self.epochs), self.conf.trainer.warmup_epochs), len(self.epochs)
        )

    def summary(self, t_end: float) -> Dict[str, float]:
        """The run's steady summary (wif.measure.epochs), with what only the harness knows: the whole run's
        time with validation and test, the stopping rule's pin, the tree's memory peaks, others' CPU share."""
        out = {**self.final, **epochs.summary(self.epochs, self.conf.trainer.warmup_epochs)}
        whole = sum(e["epoch_time_s"] + (e["val_time_s"] or 0.0) for e in self.epochs)
        out["time_total_s"] = whole + self.final.get("test_time_s", 0.0)
        if self.decision is not None and self.decision.half_width is not None:
            out["epoch_time_median_ci_rel"] = self.decision.half_width  # the steady figure's relative half-width
        out.update(self.sampler.peaks(self.epochs[0]["t_start"], t_end))
        other = self.measured_other_cpu_pct()
        if other is not None:
            out["host_other_cpu_pct"] = other
        return out
