"""What `wif-advise` is asked, its Options, and what it answers, its Advice; and the minutes each part gets.

Of the minutes the answer keeps ANSWER_S, and a race run takes `race_epochs` epochs in the time left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from wif.advisor.limit import Limit
from wif.measure import names
from wif.run.noise import allocated_epochs

if TYPE_CHECKING:  # wif-advise's Options and PROG without torch and MLflow: a refusal imports neither
    from wif.advisor.runner import Measured

PROG = "wif-advise"
MIN_RACE_EPOCHS = 3  # a race run needs its warm-up and two steady epochs
TRIAL_EPOCHS = 2  # a loader-only trial: its warm-up, the workers' start, and one timed epoch; the race verifies


@dataclass
class Options:
    """What the advice is asked: its runs' sizes, its race's shape and margins, and its minutes."""

    epochs: int = 3  # measuring runs: epochs each, the first left out
    batches: int = 50  # loader-only trials: batches an epoch at most
    race_candidates: int = 2  # the best predicted raced against the current setting
    min_blocks: int = 2
    max_blocks: int = 4
    max_epochs: int = 12  # each race run: trainer.epochs=auto up to this
    margin: float = 0.02  # the race's tie margin, and the predicted gain a candidate needs to be raced
    bound_margin: float = 0.05  # within this of the bound: not data-bound
    minutes: float = 5.0  # the whole advice: the trials leave the race its time. See NOTE [ The race's time ]
    max_workers: Optional[int] = None  # the most workers the search tries; None: twice the usable cores
    started: Optional[float] = None  # time.monotonic() the minutes count from: the command's start; None: now


RACE_SLACK = 1.3  # a race run's epoch against the measuring run's. See NOTE [ How long a race run is ]
ANSWER_S = 10.0  # kept back from --minutes for the answer: the picture, the parent run's figures and artifacts

# NOTE [ How long a race run is ]
# A race run takes its warm-up epochs, then the steady epochs of Kalibera and Jones' allocation,
# `wif.run.noise.allocated_epochs`: a run's start against an epoch's cost. Past it, another block buys
# more than another epoch. Each run costs its start, the measuring run's time beyond its epochs, and its
# epochs. An epoch is priced at the slowest of the measured and predicted epochs, with RACE_SLACK on top.
# A race run's epochs are longer than the measuring run's on this machine: timm's train.py took 7.7-8.5 s
# against 6.2 s, its later epochs slower and the workers beside the step. Sized without the slack, the
# race's second block never fit.


@dataclass
class Advice:
    """What `wif-advise` found: the verdict, the pick (None: keep what you have), and the lines."""

    data_bound: bool
    sentence: str
    pick: Optional[str]
    speedup: Optional[tuple]  # estimate, low, high: against the current setting
    train_line: Optional[str]
    dataloader: Optional[str]
    why: str
    table: str
    parent_run_id: str
    runs: int
    seconds: float
    picture: Optional[str] = None
    predicted: Dict[str, float] = field(default_factory=dict)
    measured: Dict[str, float] = field(default_factory=dict)
    contention: str = ""  # whether other processes disturbed the runs, with the figure
    limit: Optional[Limit] = None  # what holds the configured setting's epoch: wif.advisor.limit
    assumes: str = ""  # what the figures assume, where that needs saying: a stream's (wif.advisor.script.runner)
    outside: str = ""  # the script's time outside the training loader, counted in the speedup (wif.advisor.answer)


# NOTE [ The race's time ]
# The race verifies; the trials only predict. So its time is kept before the worker search starts: the
# smallest race, --min-blocks blocks of the current setting and one candidate, each run its start and
# MIN_RACE_EPOCHS epochs priced as a race run's (RACE_SLACK), and half an epoch to spare. The trials get
# what is left, and always the first trial's time. A trial the minutes would cut is not started, and the
# search ends there. On a 16-core H100 node the search of 12 trials took 149 s of --minutes 3.2 and left the
# race none.


def race_reserve_s(now: Measured, opts: Options, left_s: float = math.inf) -> float:
    """Seconds the smallest race takes, kept from the trials of the `left_s` left (NOTE [ The race's time ])."""
    epoch = now.median() * RACE_SLACK
    start = now.start_s
    if not epoch > 0:
        return 0.0
    # a race given exactly the smallest race's time, less the seconds after the trials, floors to an epoch fewer
    race = opts.min_blocks * 2 * (start + (MIN_RACE_EPOCHS + 0.5) * epoch)
    return max(min(race, left_s - (start + TRIAL_EPOCHS * now.median())), 0.0)


def race_epochs(left_s: float, now: Measured, predicted_s: Sequence[float], opts: Options, warmup: int = 1) -> int:
    """Epochs one race run takes: its warm-up, then the steady epochs worth more than another block.

    At least MIN_RACE_EPOCHS, at most --max-epochs, and fewer where --min-blocks blocks would not fit in
    `left_s`. See NOTE [ How long a race run is ].

    Args:
        left_s: the seconds left for the race.
        now: the configured setting's measuring run.
        predicted_s: the raced candidates' predicted epochs.
        opts: the advice's options: --min-blocks and --max-epochs.
        warmup: trainer.warmup_epochs.
    """
    epoch = max([now.median(), *predicted_s]) * RACE_SLACK
    start = now.start_s
    per_run = left_s / (opts.min_blocks * (len(predicted_s) + 1))
    if not epoch > 0:
        return opts.max_epochs
    steady = math.ceil(allocated_epochs(start / epoch, 1.0, None))
    wanted = max(MIN_RACE_EPOCHS, warmup + steady)
    return int(max(min(opts.max_epochs, wanted, (per_run - start) // epoch), 0))


def log_answer(tracker: Any, parent: str, out: Advice, runs: Sequence[Measured]) -> None:
    """The answer's figures, words and table on the parent run: docs/what-each-run-records.md lists them."""
    limit = out.limit
    metrics = {
        "advise_seconds": out.seconds,
        "advise_runs": out.runs,
        "data_bound": out.data_bound,
        "contended_runs": sum(m.contended for m in runs),
    }
    if limit:
        metrics.update({names.LIMIT_SHARE: limit.share, names.INTERFERENCE_S: limit.interference_s})
        metrics["interference"] = limit.interference
    if limit and limit.busy is not None:
        metrics.update(gpu_busy_step=limit.busy, launch_bound=float(limit.launch_bound))
    if out.speedup:
        metrics.update(zip(("speedup", "speedup_ci_low", "speedup_ci_high"), out.speedup))
    tracker.log_metrics(parent, metrics)
    tracker.set_tags(
        parent,
        {
            "wif.advise.pick": out.pick or "keep",
            "wif.advise.limit": limit.kind if limit else "",
            "wif.advise.sentence": out.sentence[:4000],
            "wif.advise.train_line": out.train_line or "",
            "wif.advise.contention": out.contention[:4000],
        },
    )
    tracker.client.log_text(parent, out.table, "candidates.txt")
    if out.picture:
        tracker.client.log_artifact(parent, out.picture)
