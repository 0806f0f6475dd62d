"""The measuring runs of `wif-advise`: the study's own loop in a forked, sampled child, recorded in MLflow.

Each run is `wif.run.supervise.supervise`'s, nested under the advice's parent run and tagged `wif.kind=advise`.
The mode says what to run; a script's runs are `wif.advisor.script.runner`'s. A run whose others' CPU share
passes `measure.contended_pct` is tagged `wif.contended=true` and runs again once while there is time.
"""

from __future__ import annotations

import contextlib
import enum
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional

from wif.config import Config, validate
from wif.measure import names
from wif.measure.epochs import EPOCH_KEYS, steady
from wif.measure.sysinfo import host_tags
from wif.measure.tracking import FINISHED, KILLED, Tracker
from wif.run.model import model_label
from wif.tools.tune_trials import run_recorded

SKIPPED = "SKIPPED"  # a measurement not started: the advice's minutes had run out


class Failure(enum.Enum):
    """Why a measuring run gave no figure. Its one line, `Measured.error`, is for people only."""

    OUT_OF_TIME = "out_of_time"  # the advice's --minutes ran out before the run started, or stopped it
    RAN_OUT = "ran_out"  # the script ended before the measurement had its windows
    UNREACHED = "unreached"  # the order did not reach the loader (wif.watcher.proof)
    FAILED = "failed"  # the run failed otherwise: its line says how


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
    failure: Optional[Failure] = None  # None where it finished
    warmup: int = 1
    wall_s: float = 0.0  # the run's whole time, its start and end included
    contended: bool = False  # others took more than measure.contended_pct of each idle core (is_contended)
    replaced: bool = False  # contended, and run again: the run again is what the advice uses

    @property
    def ok(self) -> bool:
        """Whether it finished with epochs to read."""
        return self.status == FINISHED and bool(self.epochs)

    @property
    def other_pct(self) -> Optional[float]:
        """Percent of one core other processes used during its measured epochs; None: not measured."""
        return self.summary.get(names.HOST_OTHER_CPU_PCT)

    @property
    def start_s(self) -> float:
        """Its time beyond its epochs: the process's start, data, set-up and end."""
        return max(self.wall_s - sum(e[names.EPOCH_TIME_S] for e in self.epochs), 0.0)

    @property
    def steady(self) -> List[Dict[str, float]]:
        """Its epochs past the warm-up."""
        return steady(self.epochs, self.warmup)

    def mean(self, key: str) -> float:
        """The steady epochs' mean of `key`; NaN where no epoch has it."""
        values = [e[key] for e in self.steady if e.get(key) is not None and not math.isnan(e[key])]
        return statistics.mean(values) if values else math.nan

    def median(self, key: str = names.EPOCH_TIME_S) -> float:
        """The steady epochs' median of `key`; NaN where no epoch has it."""
        values = [e[key] for e in self.steady if e.get(key) is not None]
        return statistics.median(values) if values else math.nan

    @property
    def n_train(self) -> int:
        """The training images an epoch took, as the run counted them."""
        return int(self.tags.get(names.TAG_N_TRAIN, 0))


class Ended(NamedTuple):
    """A measuring run as it ended: its record, its status, its summary, its error in one line, and why."""

    run_id: str
    status: str
    summary: Dict[str, float]
    error: str
    failure: Optional[Failure] = None


@dataclass(frozen=True)
class Recording:
    """Where the advice's runs are recorded: the store, the device, the parent run and the advice's id."""

    tracker: Tracker
    device: str
    parent_id: str
    advise_id: str


class Runner:
    """Runs configurations nested under one parent; a contended one again while there is time before `deadline`."""

    def __init__(self, recording: Recording, deadline: float = math.inf, say: Callable[[str], None] = print) -> None:
        self.tracker, self.device = recording.tracker, recording.device
        self.parent_id, self.advise_id = recording.parent_id, recording.advise_id
        self.deadline, self.say = deadline, say
        self.kept_s = 0.0  # seconds of the deadline kept for a later step: see `keeping`
        self.runs: List[Measured] = []
        self.reruns = 0  # contended runs run again
        self.assumes = ""  # what the measured figures assume, said with the answer ('' where nothing needs saying)

    def left_s(self) -> float:
        """Seconds left before the advice's deadline, less those kept for a later step."""
        return self.deadline - self.kept_s - time.monotonic()

    @contextlib.contextmanager
    def keeping(self, seconds: float) -> Iterator[None]:
        """Within the block, runs leave `seconds` of the deadline to a later step: none starts or runs into them."""
        self.kept_s = max(seconds, 0.0)
        try:
            yield
        finally:
            self.kept_s = 0.0

    def run(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]] = None) -> Measured:
        """The run; a contended one is run again once, where another fits before the deadline.

        None is started past the deadline: a SKIPPED measurement, no run recorded.

        Args:
            conf: the run's configuration.
            role: what the advice runs it for: measure, bound, loader or race.
            name: the setting it runs.
            extra: more tags for its record.
        """
        if self.left_s() < MIN_RUN_S:
            kept = f", {self.kept_s:.0f} s kept for the race" if self.kept_s else ""
            error = f"the --minutes ran out before it started ({role} {name}{kept})"
            return Measured(
                role=role, name=name, run_id="", status=SKIPPED, summary={}, error=error, failure=Failure.OUT_OF_TIME
            )
        m = self._once(conf, role, name, extra)
        if m.contended and m.wall_s < self.left_s():
            self.reruns += 1
            self.say(
                f"  {role} {name}: other processes used {m.other_pct:.0f}% of a core during its measured "
                f"epochs (contended): run again"
            )
            m.replaced = True
            m = self._once(conf, role, name, extra)
        return m

    def _once(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Measured:
        """One run of `conf`, recorded and read back."""
        t0 = time.monotonic()
        conf.progress = False
        validate(conf)
        run_id, outcome, text = run_recorded(
            self.tracker,
            conf,
            device=self.device,
            name=f"advise-{role}-{name}",
            tags=self.tags(conf, role, name, extra=extra),
            label=f"{role} {name}",
        )
        failure = None if outcome.status in (FINISHED, KILLED) else Failure.FAILED
        return self.measured(conf, role, name, Ended(run_id, outcome.status, outcome.summary, text, failure), t0)

    def tags(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        """A nested run's tags: the advice it belongs to, its role and setting."""
        return {
            **host_tags(),
            names.TAG_KIND: "advise",
            names.TAG_ADVISE_ID: self.advise_id,
            names.TAG_ADVISE_ROLE: role,
            "mlflow.parentRunId": self.parent_id,
            names.TAG_LOADER: name,
            names.TAG_DEVICE: self.device,
            names.TAG_GPU: "none",
            names.TAG_MODEL: model_label(conf.model),
            names.TAG_FRACTION: f"{conf.data.fraction:g}",
            names.TAG_CELL: f"advise-{self.advise_id}-{name}",
            **(extra or {}),
        }

    def measured(self, conf: Config, role: str, name: str, ended: Ended, t0: float) -> Measured:
        """The ended run read back: its epochs, tags and outcome. Ctrl-C's KILLED is raised again, once kept.

        Args:
            conf: the run's configuration: its warm-up epochs.
            role: what the advice ran it for.
            name: the setting it ran.
            ended: how it ended.
            t0: when it started, on time.monotonic()'s clock.
        """
        tags = dict(self.tracker.client.get_run(ended.run_id).data.tags)
        m = Measured(
            role=role,
            name=name,
            run_id=ended.run_id,
            status=ended.status,
            summary=ended.summary,
            epochs=self._epochs(ended.run_id),
            tags=tags,
            error=ended.error,
            failure=ended.failure,
            warmup=conf.trainer.warmup_epochs,
            wall_s=time.monotonic() - t0,
            contended=tags.get(names.TAG_CONTENDED) == "true",
        )
        self.runs.append(m)
        if ended.status == KILLED:
            raise KeyboardInterrupt
        return m

    def _epochs(self, run_id: str) -> List[Dict[str, float]]:
        """The run's figures, epoch by epoch, read back from its metric history."""
        history = {k: {m.step: m.value for m in self.tracker.client.get_metric_history(run_id, k)} for k in EPOCH_KEYS}
        steps = sorted(history[names.EPOCH_TIME_S])
        return [{k: history[k].get(s, math.nan) for k in EPOCH_KEYS} for s in steps]
