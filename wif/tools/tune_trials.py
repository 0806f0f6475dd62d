"""`wif-tune`'s trials: the configured loader as a loader-only run at one worker count and pinning.

The keys that only mean something with workers are turned off without any (`WORKER_ONLY`). Each trial is
supervised and recorded as its own MLflow run tagged `wif.kind=tune`, in the study's store. The search, the
table and the command line (`tune`, `worker_search`) only ask a trial how many images a second it fed.
`run_recorded` runs wif-advise's measuring runs too.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from wif import dataloader_args
from wif.config import Config, TrainerMode, as_plain, validate
from wif.measure import names
from wif.measure.contention import is_contended
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.run.model import model_label
from wif.run.supervise import REFUSED, Outcome, supervise

# Loader keys that only mean something with worker processes, and their value without any: DataLoader's default.
WORKER_ONLY = tuple((arg.name, arg.default) for arg in dataloader_args.WORKER_ONLY)


@dataclass
class Trial:
    """One trial: its setting, its phase of the search, and its run's outcome."""

    pin_memory: bool
    num_workers: int
    phase: str
    status: str
    run_id: str
    summary: Dict[str, float]
    error: str = ""

    @property
    def img_s(self) -> Optional[float]:
        """The images a second it fed; None where it did not finish."""
        return self.summary.get(names.THROUGHPUT_MEAN_IMG_S) if self.status == FINISHED else None


def trial_config(base: Config, num_workers: int, pin_memory: bool, batches: int, epochs: int) -> Config:
    """The base configuration as a loader-only run with this worker count and pinning.

    Args:
        base: the searched configuration.
        num_workers: the trial's worker count; without workers, the worker-only keys turned off.
        pin_memory: the trial's pinning.
        batches: batches timed an epoch.
        epochs: epochs of the trial.
    """
    conf = copy.deepcopy(base)
    conf.loader.num_workers, conf.loader.pin_memory = num_workers, pin_memory
    if num_workers == 0:
        for key, neutral in WORKER_ONLY:
            if hasattr(conf.loader, key):
                setattr(conf.loader, key, neutral)
    tr = conf.trainer
    tr.mode, tr.max_batches, tr.epochs = TrainerMode.loader_only, batches, epochs
    conf.progress = False
    validate(conf)
    return conf


def run_recorded(
    tracker: Tracker, conf: Config, device: str, name: str, tags: Dict[str, str], label: str
) -> Tuple[str, Outcome, str]:
    """(run id, outcome, its error in one line or ''): one run supervised, with an MLflow record of its own.

    Unlike a sweep's job (wif.sweep.job), the record exists before the run starts. A refusal from inside the
    run, such as a failing data factory, then ends it FAILED, not absent. FINISHED logs the summary and tags
    `wif.contended`; any other outcome tags `wif.error`. A KILLED outcome, by Ctrl-C, is the caller's to act
    on, once it has kept what it needs.

    Args:
        tracker: the MLflow store the run is recorded in.
        conf: the run's configuration.
        device: "cuda" or "cpu".
        name: the run's name.
        tags: the run's tags.
        label: how the run's lines name it.
    """
    plain = as_plain(conf)
    run_id = tracker.start_run(name, plain, tags, plain)
    outcome = supervise(conf=conf, device=device, tracker=tracker, open_run=lambda: run_id, label=label, tags=tags)
    if outcome.status == REFUSED:  # the record exists already: the run failed
        outcome = Outcome(FAILED, outcome.error)
    error = outcome.error or {}
    text = f"{error.get('type')}: {error.get('message')}" if error else ""
    if outcome.status == FINISHED:
        tracker.log_metrics(run_id, outcome.summary)
        contended = is_contended(outcome.summary, conf.measure.contended_pct)
        tracker.set_tags(run_id, {names.TAG_CONTENDED: str(contended).lower()})  # as a sweep's job is tagged
    else:
        tracker.set_tags(run_id, {names.TAG_ERROR: text[:4000]})
    tracker.end_run(run_id, outcome.status)
    return run_id, outcome, text


class Tuner:
    """Runs and records trials; one MLflow run each, in the study's store."""

    def __init__(self, base: Config, device: str, args: argparse.Namespace) -> None:
        self.base, self.device, self.args = base, device, args
        self.tracker = Tracker(base.tracking.uri, base.tracking.experiment)
        self.tune_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.trials: List[Trial] = []

    def run(self, pin_memory: bool, num_workers: int, phase: str) -> Optional[float]:
        """One trial run and recorded: its images/s, None where it failed; KeyboardInterrupt where it was killed."""
        conf = trial_config(
            self.base,
            num_workers=num_workers,
            pin_memory=pin_memory,
            batches=self.args.batches,
            epochs=self.args.epochs,
        )
        label = f"pin_memory={pin_memory} num_workers={num_workers}"
        run_id, outcome, error = run_recorded(
            tracker=self.tracker,
            conf=conf,
            device=self.device,
            name=f"tune-{conf.loader.name}-pin{int(pin_memory)}-w{num_workers}",
            tags=self._tags(conf, phase),
            label=label,
        )
        trial = Trial(
            pin_memory=pin_memory,
            num_workers=num_workers,
            phase=phase,
            status=outcome.status,
            run_id=run_id,
            summary=outcome.summary,
            error=error,
        )
        self.trials.append(trial)
        print(
            f"  {phase:<6} {label:<34} " + (f"{trial.img_s:>10.0f} img/s" if trial.img_s else trial.error), flush=True
        )
        if outcome.status == KILLED:
            raise KeyboardInterrupt
        return trial.img_s

    def _tags(self, conf: Config, phase: str) -> Dict[str, Any]:
        """A trial run's tags: the search it belongs to, its phase and setting, as a study run's are."""
        return {
            **host_tags(),
            names.TAG_KIND: "tune",
            "wif.tune_id": self.tune_id,
            "wif.tune_phase": phase,
            names.TAG_LOADER: conf.loader.name,
            names.TAG_FRACTION: f"{conf.data.fraction:g}",
            names.TAG_DEVICE: self.device,
            names.TAG_GPU: "none",
            names.TAG_MODEL: model_label(conf.model),
            names.TAG_TRANSFER: conf.transfer.kind.value,
            "wif.num_workers": conf.loader.num_workers,
            "wif.pin_memory": conf.loader.pin_memory,
        }
