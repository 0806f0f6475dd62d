"""How a run's figure scatters: within the run and between runs, and how many epochs pin it.

The figure is the median of the steady epochs, its interval distribution-free (order statistics, binomial
ranks). A cell's between-run noise is read from earlier runs once, before the run starts. Kalibera and Jones'
allocation weighs the two. `wif.run.stopping` asks these after each epoch.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from wif.measure import names

log = logging.getLogger("wif")
DRIFT_Z = 1.96  # Mann-Kendall's z above which the steady epochs still trend (5%, two-sided)
MIN_BETWEEN_DF = 2  # degrees of freedom a between-run sd needs (an sd of 2 runs ranges over a factor of 30)
# An earlier run of the same testbed shares these tags; the host stands in for wif.gpu, set once a run has started.
TESTBED_TAGS = (names.TAG_DEVICE, names.TAG_HOST, names.TAG_MODEL, names.TAG_STEP, names.TAG_ENGINE, names.TAG_TRANSFER)
HISTORY_RUNS = 200  # the newest earlier runs read a query (MLflow loads each whole: ~8 ms a run on SQLite)


def median_interval(values: Sequence[float], confidence: float) -> Optional[Tuple[float, float]]:
    """The distribution-free interval of the median: the k-th smallest and largest value; None below n=6 at 95%.

    The rank k is the largest whose coverage, 1 - 2 P[Binomial(n, 1/2) < k], is at least `confidence`.
    """
    n, xs = len(values), sorted(values)
    alpha_half, tail, k = (1.0 - confidence) / 2.0, 0.0, 0
    for j in range(n // 2):  # tail = P(B < j + 1); x_(j+1) may bound the interval while it stays within alpha/2
        tail += math.comb(n, j) / 2.0**n
        if tail > alpha_half:
            break
        k = j + 1
    if k == 0:
        return None
    return xs[k - 1], xs[n - k]


def within_sd(steady: Sequence[float]) -> float:
    """The epoch-to-epoch scatter, relative: the sd of the log epoch times; not a MAD, which dips by chance."""
    logs = [math.log(x) for x in steady if x > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def drift(steady: Sequence[float]) -> Optional[float]:
    """The steady epochs' trend per epoch, relative to their median; None when they show none.

    The slope is Theil-Sen's, counted where Mann-Kendall finds a trend: 5%, two-sided, normal approximation with
    continuity correction. A run still speeding up or slowing down has no steady figure yet.
    """
    n = len(steady)
    if n < 3:
        return None
    s = sum((b > a) - (b < a) for i, a in enumerate(steady) for b in steady[i + 1 :])
    if (abs(s) - 1) / math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0) <= DRIFT_Z:
        return None
    slope = statistics.median((steady[j] - steady[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    return slope / statistics.median(steady)


def material_drift(steady: Sequence[float], target: float) -> Optional[float]:
    """`drift` over the recent half of the steady epochs, at least 6; None unless it moves them by over `target`.

    Over many epochs Mann-Kendall finds any slope: a run of 60 epochs was held by a drift worth 0.9% in all.
    """
    recent = list(steady[-max(6, len(steady) // 2) :])
    trend = drift(recent)
    return trend if trend is not None and abs(trend) * len(recent) > target else None


def allocated_epochs(start_cost: float, within: float, between: Optional[float]) -> float:
    """Kalibera and Jones' optimal repetitions of the lower level, libkalibera's `optimalreps`.

    Steady epochs per run = sqrt(start_cost x within^2 / between^2), `start_cost` being a run's start in
    epochs. The two noises are taken as equal when no earlier run tells the between-run one.
    """
    ratio = 1.0 if between is None else (within / between if between > 0 else math.inf)
    return math.sqrt(max(start_cost, 0.0)) * ratio


@dataclass(frozen=True)
class Between:
    """The between-run noise of a cell seen in earlier finished runs: the sd of their log figures."""

    sd: float  # relative (sd of log epoch_time_median_s)
    runs: int
    own: bool  # True: this cell's own runs; False: pooled over `cells` cells of the testbed
    cells: int = 1

    def describe(self) -> str:
        """The noise in words, for the stop reason."""
        where = "this cell" if self.own else f"{self.cells} cells of this testbed, pooled"
        return f"between-run sd {100 * self.sd:.1f}% of {self.runs} earlier runs of {where}"


def between_run_noise(figures: Mapping[str, Sequence[float]], cell: str) -> Optional[Between]:
    """The cell's between-run noise from earlier runs' figures (cell -> figures); None without any.

    That is its own sd once it has MIN_BETWEEN_DF + 1 runs, else the sd pooled over every cell with two runs.
    """
    logs = {c: [math.log(x) for x in xs if x > 0] for c, xs in figures.items()}
    own = logs.get(cell, [])
    if len(own) > MIN_BETWEEN_DF:
        return Between(sd=statistics.stdev(own), runs=len(own), own=True)
    groups = [xs for xs in logs.values() if len(xs) >= 2]
    df = sum(len(xs) - 1 for xs in groups)
    if df < MIN_BETWEEN_DF:
        return None
    squares = sum((x - statistics.fmean(xs)) ** 2 for xs in groups for x in xs)
    return Between(sd=math.sqrt(squares / df), runs=sum(len(xs) for xs in groups), own=False, cells=len(groups))


def read_between(client: Any, experiment_id: str, tags: Dict[str, str]) -> Optional[Between]:
    """The between-run noise of the cell a run with these `tags` measures, read once before the run starts.

    It reads earlier finished, uncontended runs of the same kind and testbed: the cell's own, then the sweep's
    earlier blocks. A store that cannot answer costs the run this evidence only: the target is then the tie margin.
    """
    cell = tags.get(names.TAG_CELL, "")
    try:
        figures = _figures_by_cell(client, experiment_id, tags, key=names.TAG_CELL)
        if len(figures.get(cell, {})) <= MIN_BETWEEN_DF:
            for other, runs in _figures_by_cell(client, experiment_id, tags, key=names.TAG_SWEEP_ID).items():
                figures.setdefault(other, {}).update(runs)
    except Exception as err:  # noqa: BLE001 - e.g. a busy store or a server gone for a moment
        log.warning("trainer.auto_target=auto: earlier runs unreadable (%s); no between-run noise used", err)
        return None
    return between_run_noise({c: list(runs.values()) for c, runs in figures.items()}, cell)


def _figures_by_cell(client: Any, experiment_id: str, tags: Dict[str, str], key: str) -> Dict[str, Dict[str, float]]:
    """cell -> run id -> steady figure of the earlier runs that share the testbed and the tag `key` with `tags`.

    Args:
        client: the MLflow client.
        experiment_id: the experiment the runs are in.
        tags: the tags of the run about to start.
        key: the tag the earlier runs must share: the cell's, or the sweep's.
    """
    same = [f"tags.`{k}` = '{tags[k]}'" for k in TESTBED_TAGS if k in tags and "'" not in tags[k]]
    kind = tags.get(names.TAG_KIND, "train").replace("'", "")  # a study's runs, or one wif-advise race's
    where = " and ".join(
        [
            f"tags.`{names.TAG_KIND}` = '{kind}'",
            "attributes.status = 'FINISHED'",
            *same,
            f"tags.`{key}` = '{tags.get(key, '').replace(chr(39), '')}'",
        ]
    )
    figures: Dict[str, Dict[str, float]] = {}
    for run in client.search_runs(
        [experiment_id], where, max_results=HISTORY_RUNS, order_by=["attributes.start_time DESC"]
    ):
        figure = run.data.metrics.get(names.EPOCH_TIME_MEDIAN_S)
        if figure and run.data.tags.get(names.TAG_CONTENDED) != "true":
            figures.setdefault(run.data.tags.get(names.TAG_CELL, "?"), {})[run.info.run_id] = figure
    return figures
