"""The measuring steps of `wif-advise`, each one run of the study's own loop in a forked, sampled child
(`wif.run.supervise.supervise`), recorded in MLflow nested under the advice's parent run
(tag `mlflow.parentRunId`) and tagged `wif.kind=advise`, so the study's report never mixes them in.

- the configured setting's training epochs: the split into data wait, copy, compute and GPU idle;
- the compute bound: `data=fixed` (the same batch on the device every step), or for `data=custom` the
  configured run's own step time (data=fixed cannot make the user's batches);
- loader-only trials of each candidate: its ceiling, and its rate per item for the prediction.

Other processes' CPU use during each run's measured epochs is the study's own figure (`host_other_cpu_pct`,
`wif.measure.contention`); a run above `measure.contended_pct` is tagged `wif.contended=true` and run again
once while the advice has time (`Runner.run`), so no answer rests on a disturbed run it could have repeated.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from wif.config import Augment, Config, DataSource, PageCache, TrainerMode, validate
from wif.measure.epochs import EPOCH_KEYS, steady
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FINISHED, KILLED, Tracker
from wif.run.model import model_label
from wif.tools.recorded import run_recorded
from wif.tools.tune import WORKER_ONLY


@dataclass
class Candidate:
    """A loader setting: the keys it sets (as train.py overrides) and what the prediction needs of it."""

    name: str
    keys: Dict[str, Any]  # dotted config key -> value, e.g. {"loader.num_workers": 4}
    workers: int = 0
    persistent: bool = False
    prefetch: int = 2
    copy_hidden: bool = False

    def overrides(self) -> List[str]:
        return [f"{k}={_text(v)}" for k, v in self.keys.items()]


def _text(value: Any) -> str:
    """A value as a train.py override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(getattr(value, "value", value))


def apply(base: Config, cand: Candidate) -> Config:
    """The base configuration with the candidate's keys set (worker-only keys neutral at 0 workers)."""
    conf = copy.deepcopy(base)
    for key, value in cand.keys.items():
        group, name = key.split(".", 1)
        node = getattr(conf, group)
        old = getattr(node, name)
        setattr(
            node, name, type(old)(value) if old is not None and value is not None and hasattr(old, "value") else value
        )
    if conf.loader.num_workers == 0:
        for key, neutral in WORKER_ONLY:
            setattr(conf.loader, key, neutral)
    return conf


SKIPPED = "SKIPPED"  # a measurement not started: the advice's minutes had run out
MIN_RUN_S = 1.0  # a run is not started with less time than this left


@dataclass
class Measured:
    """One measuring run: its record, outcome and per-epoch figures (steady: the warm-up left out)."""

    role: str
    name: str
    run_id: str
    status: str
    summary: Dict[str, float]
    epochs: List[Dict[str, float]] = field(default_factory=list)
    tags: Dict[str, str] = field(default_factory=dict)
    error: str = ""
    warmup: int = 1
    wall_s: float = 0.0  # the run's whole time, its start and end included
    contended: bool = False  # others took more than measure.contended_pct of a core during its measured epochs
    replaced: bool = False  # contended, and run again: the run again is what the advice uses

    @property
    def ok(self) -> bool:
        return self.status == FINISHED and bool(self.epochs)

    @property
    def other_pct(self) -> Optional[float]:
        """Percent of one core other processes used during its measured epochs (None: not measured)."""
        return self.summary.get("host_other_cpu_pct")

    @property
    def steady(self) -> List[Dict[str, float]]:
        return steady(self.epochs, self.warmup)

    def mean(self, key: str) -> float:
        """The steady epochs' mean of `key`; NaN where no epoch has it."""
        values = [e[key] for e in self.steady if e.get(key) is not None and not math.isnan(e[key])]
        return statistics.mean(values) if values else math.nan

    def median(self, key: str = "epoch_time_s") -> float:
        values = [e[key] for e in self.steady if e.get(key) is not None]
        return statistics.median(values) if values else math.nan

    @property
    def n_train(self) -> int:
        return int(self.tags.get("wif.n_train", 0))


class Runner:
    """Runs configurations as runs nested under one parent, each contended one again while there is time
    before `deadline` (time.monotonic())."""

    def __init__(
        self,
        tracker: Tracker,
        device: str,
        parent_id: str,
        advise_id: str,
        deadline: float = math.inf,
        say: Callable[[str], None] = print,
    ) -> None:
        self.tracker, self.device, self.parent_id, self.advise_id = tracker, device, parent_id, advise_id
        self.deadline, self.say = deadline, say
        self.runs: List[Measured] = []
        self.reruns = 0  # contended runs run again

    def left_s(self) -> float:
        """Seconds left before the advice's deadline."""
        return self.deadline - time.monotonic()

    def run(
        self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]] = None, reruns: int = 1
    ) -> Measured:
        """The run; a contended one is run again, up to `reruns` times, while another fits before the deadline.
        None is started past the deadline: a SKIPPED measurement, no run recorded."""
        if self.left_s() < MIN_RUN_S:
            return Measured(
                role, name, "", SKIPPED, {}, error=f"the --minutes ran out before it started ({role} {name})"
            )
        m = self._once(conf, role, name, extra)
        while m.contended and reruns > 0 and m.wall_s < self.left_s():
            reruns -= 1
            self.reruns += 1
            self.say(
                f"  {role} {name}: other processes used {m.other_pct:.0f}% of a core during its measured "
                f"epochs (contended): run again"
            )
            m.replaced = True
            m = self._once(conf, role, name, extra)
        return m

    def _once(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Measured:
        t0 = time.monotonic()
        conf.progress = False
        validate(conf)
        run_id, outcome, text = run_recorded(
            self.tracker,
            conf,
            self.device,
            f"advise-{role}-{name}",
            self.tags(conf, role, name, extra),
            f"{role} {name}",
        )
        return self.measured(run_id, role, name, outcome.status, outcome.summary, text, conf.trainer.warmup_epochs, t0)

    def tags(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        """A nested run's tags: the advice it belongs to, its role and setting."""
        return {
            **host_tags(),
            "wif.kind": "advise",
            "wif.advise_id": self.advise_id,
            "wif.advise_role": role,
            "mlflow.parentRunId": self.parent_id,
            "wif.loader": name,
            "wif.device": self.device,
            "wif.gpu": "none",
            "wif.model": model_label(conf.model),
            "wif.fraction": f"{conf.data.fraction:g}",
            "wif.cell": f"advise-{self.advise_id}-{name}",
            **(extra or {}),
        }

    def measured(
        self,
        run_id: str,
        role: str,
        name: str,
        status: str,
        summary: Dict[str, float],
        text: str,
        warmup: int,
        t0: float,
    ) -> Measured:
        """The ended run read back: its epochs, tags and outcome (Ctrl-C's KILLED raised again, once kept)."""
        record = self.tracker.client.get_run(run_id)
        m = Measured(
            role,
            name,
            run_id,
            status,
            summary,
            self._epochs(run_id),
            dict(record.data.tags),
            text,
            warmup,
            time.monotonic() - t0,
            record.data.tags.get("wif.contended") == "true",
        )
        self.runs.append(m)
        if status == KILLED:
            raise KeyboardInterrupt
        return m

    # What the workload's own measurements are (wif.advisor.script runs a user's script instead of train.py):
    bound_label = "data=fixed"  # what the bound is, as the answer names it
    # the other knobs at the best count (None: candidates.extras)
    knobs: Optional[Callable[..., List[Candidate]]] = None

    def bound(self, base: Config, epochs: int, n_train: int) -> Optional[Config]:
        """The bound's run (None: the configured run's own step time stands for it)."""
        return bound(base, epochs, n_train)

    def _epochs(self, run_id: str) -> List[Dict[str, float]]:
        history = {k: {m.step: m.value for m in self.tracker.client.get_metric_history(run_id, k)} for k in EPOCH_KEYS}
        steps = sorted(history["epoch_time_s"])
        return [{k: history[k].get(s, math.nan) for k in EPOCH_KEYS} for s in steps]


def training(base: Config, cand: Candidate, epochs: int) -> Config:
    """A candidate's training run of `epochs` fixed epochs (the first is warm-up)."""
    conf = apply(base, cand)
    conf.trainer.mode, conf.trainer.epochs = TrainerMode.train, epochs
    return conf


def raced(base: Config, cand: Candidate, max_epochs: int) -> Config:
    """A candidate's run in the race: trainer.epochs=auto, capped at `max_epochs`."""
    conf = apply(base, cand)
    tr = conf.trainer
    tr.mode, tr.epochs, tr.max_epochs = TrainerMode.train, "auto", min(tr.max_epochs, max_epochs)
    tr.min_epochs = min(tr.min_epochs, tr.max_epochs)
    return conf


def loader_only(base: Config, cand: Candidate, batches: int, epochs: int) -> Config:
    """A candidate's loader-only trial: `batches` batches an epoch, no model."""
    conf = apply(base, cand)
    tr = conf.trainer
    tr.mode, tr.epochs, tr.max_batches = TrainerMode.loader_only, epochs, batches
    return conf


def bound(base: Config, epochs: int, n_train: int) -> Optional[Config]:
    """data=fixed at the configured model, step, batch and image size, `n_train` items an epoch (the measured
    run's: the same batches an epoch as the workload it stands for, whatever data.num_train says); None where
    it cannot stand for the data (data=custom: your Dataset decides the inputs' shape)."""
    if base.data.source is DataSource.custom:
        return None
    conf = apply(base, Candidate("bound", {"loader.num_workers": 0}))
    d = conf.data
    d.source, d.format, d.preload, d.augment, d.page_cache = DataSource.fixed, None, False, Augment.none, PageCache.warm
    d.num_train, d.fraction, d.val_split = max(n_train, 1), 1.0, 0.0
    conf.transfer.uint8 = False
    conf.trainer.mode, conf.trainer.epochs = TrainerMode.train, epochs
    return conf
