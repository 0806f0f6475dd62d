"""`wif-tune`'s trials: the configured loader as a loader-only run at one worker count and pinning (the keys
that only mean something with workers turned off without any, `WORKER_ONLY`), each supervised and recorded
as its own MLflow run tagged `wif.kind=tune`, in the study's store. Apart from the search, the table and the command
line (`tune`), which only ask a trial how many images a second it fed.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from wif.config import Config, TrainerMode, validate
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FINISHED, KILLED, Tracker
from wif.run.model import model_label
from wif.tools.recorded import run_recorded

# Loader keys that only mean something with worker processes, and their value without any.
WORKER_ONLY = (
    ("prefetch_factor", None),
    ("persistent_workers", False),
    ("in_order", True),
    ("multiprocessing_context", None),
)


@dataclass
class Trial:
    pin_memory: bool
    num_workers: int
    phase: str
    status: str
    run_id: str
    summary: Dict[str, float]
    error: str = ""

    @property
    def img_s(self) -> Optional[float]:
        return self.summary.get("throughput_mean_img_s") if self.status == FINISHED else None


def trial_config(base: Config, num_workers: int, pin_memory: bool, batches: int, epochs: int) -> Config:
    """The base configuration as a loader-only run with this worker count and pinning."""
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


class Tuner:
    """Runs and records trials; one MLflow run each, in the study's store."""

    def __init__(self, base: Config, device: str, args: argparse.Namespace) -> None:
        self.base, self.device, self.args = base, device, args
        self.tracker = Tracker(base.tracking.uri, base.tracking.experiment)
        self.tune_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.trials: List[Trial] = []

    def run(self, pin_memory: bool, num_workers: int, phase: str) -> Optional[float]:
        conf = trial_config(self.base, num_workers, pin_memory, self.args.batches, self.args.epochs)
        fraction = f"{conf.data.fraction:g}"
        tags = {
            **host_tags(),
            "wif.kind": "tune",
            "wif.tune_id": self.tune_id,
            "wif.tune_phase": phase,
            "wif.loader": conf.loader.name,
            "wif.fraction": fraction,
            "wif.device": self.device,
            "wif.gpu": "none",
            "wif.model": model_label(conf.model),
            "wif.transfer": conf.transfer.kind.value,
            "wif.num_workers": num_workers,
            "wif.pin_memory": pin_memory,
        }
        name = f"tune-{conf.loader.name}-pin{int(pin_memory)}-w{num_workers}"
        label = f"pin_memory={pin_memory} num_workers={num_workers}"
        run_id, outcome, error = run_recorded(self.tracker, conf, self.device, name, tags, label)
        trial = Trial(pin_memory, num_workers, phase, outcome.status, run_id, outcome.summary, error)
        self.trials.append(trial)
        print(
            f"  {phase:<6} {label:<34} " + (f"{trial.img_s:>10.0f} img/s" if trial.img_s else trial.error), flush=True
        )
        if outcome.status == KILLED:
            raise KeyboardInterrupt
        return trial.img_s
