"""trainer.epochs=auto: when a run's compared figure is pinned down, so that more epochs would tell nothing new.

A pure rule, asked at epoch boundaries only (the run waits for its ack between epochs anyway, so asking
costs the timed epochs nothing). The warm-up epochs are set apart; over the steady epochs after them the
run's figure is their median epoch time (the report's `epoch_time_median_s`), with the distribution-free
interval of that median (order statistics, binomial ranks: no assumption about how epoch times scatter).

With `trainer.auto_target` a number, the run stops once that interval is within the target of the median on
each side. With `auto` (the default) the run stops once more epochs cannot change what its figure is for,
the comparison of cells across runs (Kalibera and Jones, "Rigorous benchmarking in reasonable time", 2013):

- pinned: the interval is within the auto target: half the report's tie margin (two runs each pinned
  within half of it differ by less than the margin from their epochs' noise alone), or, where earlier runs
  show the cell's between-run noise larger, half of that noise (the run's own error then adds at most ~3%
  to the spread of its figure across runs);
- enough: the run has as many steady epochs as Kalibera and Jones' allocation asks,
  sqrt(cost of a run's start / cost of an epoch x epoch-to-epoch variance / between-run variance): past
  it, an epoch buys less precision for the cell than the same time spent on another run. Before a cell
  has earlier runs the two variances are taken as equal.

Memory must have stopped growing too: copy-on-read RAM growth in DataLoader workers (PyTorch #13246) is a
finding, not noise, so a run whose RAM or VRAM peak still rises runs on to `max_epochs` and says so.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger("wif")
STOP, GO_ON = "stop", "logged"  # the supervisor's answer to an epoch's figures
# The report's tie margin (wif-report --margin, default 0.02: wif/report/report_cli.py); wif.run may not import the
# report (tests/test_layout.py), so it is repeated here: change both together.
TIE_MARGIN = 0.02
BETWEEN_SHARE = 0.5  # pinned within half the between-run sd: the run's own error adds <= ~3% to the spread
MIN_BETWEEN_DF = 2  # degrees of freedom a between-run sd needs (an sd of 2 runs ranges over a factor of 30)
DRIFT_Z = 1.96  # Mann-Kendall's z above which the steady epochs still trend (5%, two-sided)
# The tags whose values an earlier run must share to count as the same testbed (wif.gpu is set only once the
# run has started its device, so the host stands in for it).
TESTBED_TAGS = ("wif.device", "wif.host", "wif.model", "wif.step", "wif.engine", "wif.transfer")
HISTORY_RUNS = 200  # the newest earlier runs read a query (MLflow loads each whole: ~8 ms a run on SQLite)


@dataclass(frozen=True)
class Between:
    """The between-run noise of a cell seen in earlier finished runs: the sd of their log figures."""

    sd: float  # relative (sd of log epoch_time_median_s)
    runs: int
    own: bool  # True: this cell's own runs; False: pooled over `cells` cells of the testbed
    cells: int = 1

    def describe(self) -> str:
        where = "this cell" if self.own else f"{self.cells} cells of this testbed, pooled"
        return f"between-run sd {100 * self.sd:.1f}% of {self.runs} earlier runs of {where}"


@dataclass(frozen=True)
class StopRule:
    warmup: int = 1  # epochs set apart at the start (still measured and logged)
    min_epochs: int = 7  # never stop before this many epochs, warm-up included
    max_epochs: int = 100  # the study's epochs: never run more
    target: Optional[float] = None  # the median interval's relative half-width that pins; None: auto
    confidence: float = 0.95  # of that interval
    memory_window: int = 3  # epochs that must add no new memory peak
    memory_tolerance: float = 0.01  # a new peak counts only above the old one by more than this share
    between: Optional[Between] = None  # auto: the cell's between-run noise from earlier runs (None: none yet)
    margin: float = TIE_MARGIN  # auto: the report's tie margin


@dataclass(frozen=True)
class Decision:
    stop: bool
    reason: str  # one line, logged as the run's tag wif.stop_reason
    steady_s: Optional[float] = None  # median epoch time over the steady epochs
    half_width: Optional[float] = None  # the median interval's relative half-width (None: too few epochs)
    growing: Tuple[str, ...] = ()  # memory series whose peak still rose within the window
    target: Optional[float] = None  # the half-width that pins (trainer.auto_target, or the derived one)


def median_interval(values: Sequence[float], confidence: float) -> Optional[Tuple[float, float]]:
    """The distribution-free interval of the median: (x_(k), x_(n+1-k)) with the largest k whose coverage,
    1 - 2 P(Binomial(n, 1/2) < k), is at least `confidence`; None when n is too small for any k (n < 6 at 95%)."""
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


def min_steady_epochs(confidence: float) -> int:
    """The fewest steady epochs whose median has an interval at `confidence`."""
    n = 1
    while median_interval([0.0] * n, confidence) is None:
        n += 1
    return n


def still_growing(peaks: Sequence[float], window: int, tolerance: float) -> Optional[float]:
    """The relative rise of the peak within the last `window` epochs over every peak before them, when it
    exceeds `tolerance`; None when the peak has held (or there is no earlier epoch to compare with yet)."""
    if len(peaks) <= window:
        return float("inf")  # too few epochs to tell: treated as growing
    before, recent = max(peaks[:-window]), max(peaks[-window:])
    rise = (recent - before) / before if before > 0 else (math.inf if recent > before else 0.0)
    return rise if rise > tolerance else None


def between_run_noise(figures: Mapping[str, Sequence[float]], cell: str) -> Optional[Between]:
    """The cell's between-run noise from earlier runs' figures (cell -> figures): its own sd once it has
    MIN_BETWEEN_DF + 1 runs, else the sd pooled over every cell with two runs or more (the same testbed
    jitters alike from run to run more than cells differ in it), else None."""
    logs = {c: [math.log(x) for x in xs if x > 0] for c, xs in figures.items()}
    own = logs.get(cell, [])
    if len(own) > MIN_BETWEEN_DF:
        return Between(statistics.stdev(own), len(own), True)
    groups = [xs for xs in logs.values() if len(xs) >= 2]
    df = sum(len(xs) - 1 for xs in groups)
    if df < MIN_BETWEEN_DF:
        return None
    squares = sum((x - statistics.fmean(xs)) ** 2 for xs in groups for x in xs)
    return Between(math.sqrt(squares / df), sum(len(xs) for xs in groups), False, len(groups))


def auto_target(between: Optional[Between], margin: float = TIE_MARGIN) -> Tuple[float, str]:
    """The half-width that pins a run's figure under auto_target=auto, and why, in words."""
    floor = margin / 2.0
    if between is not None and BETWEEN_SHARE * between.sd > floor:
        return BETWEEN_SHARE * between.sd, f"{BETWEEN_SHARE:g} x {between.describe()}"
    return floor, f"half the report's {100 * margin:g}% tie margin"


def within_sd(steady: Sequence[float]) -> float:
    """The epoch-to-epoch scatter, relative: the sd of the log epoch times. Not a robust one: at 6 epochs
    a MAD dips by chance and would stop a run early; a slow epoch here only asks for more epochs."""
    logs = [math.log(x) for x in steady if x > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def drift(steady: Sequence[float]) -> Optional[float]:
    """The steady epochs' trend, per epoch relative to their median (Theil-Sen: the median pairwise slope),
    when the Mann-Kendall test finds one at 5% (two-sided, normal approximation with continuity correction);
    None when the epochs show none. A run still speeding up or slowing down has no steady figure yet."""
    n = len(steady)
    if n < 3:
        return None
    s = sum((b > a) - (b < a) for i, a in enumerate(steady) for b in steady[i + 1 :])
    if (abs(s) - 1) / math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0) <= DRIFT_Z:
        return None
    slope = statistics.median((steady[j] - steady[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    return slope / statistics.median(steady)


def material_drift(steady: Sequence[float], target: float) -> Optional[float]:
    """`drift` over the recent half of the steady epochs (at least 6), kept only where it moves the figure by
    more than `target` across them: over many epochs Mann-Kendall finds any slope, however small (a run of 60
    epochs was held by a drift worth 0.9% in all, under a 1.4% target), and a drift that small is no reason
    to run on."""
    recent = list(steady[-max(6, len(steady) // 2) :])
    trend = drift(recent)
    return trend if trend is not None and abs(trend) * len(recent) > target else None


def allocated_epochs(start_cost: float, within: float, between: Optional[float]) -> float:
    """Kalibera and Jones' optimal repetitions of the lower level (libkalibera's `optimalreps`): steady
    epochs per run = sqrt(start_cost x within^2 / between^2), `start_cost` a run's start in epochs; the two
    noises taken as equal when no earlier run tells the between-run one."""
    ratio = 1.0 if between is None else (within / between if between > 0 else math.inf)
    return math.sqrt(max(start_cost, 0.0)) * ratio


def decide(
    epoch_times: Sequence[float], memory: Dict[str, Sequence[float]], rule: StopRule, start_cost: Optional[float] = None
) -> Decision:
    """Whether a run that has finished `len(epoch_times)` epochs stops now, and why.

    `memory`: per series (ram_peak_rss_mb, vram_peak_device_mb, ...) the peak of each epoch so far.
    `start_cost`: the run's start (fork, data, model, warm-up epochs) in steady epochs, for the allocation
    under auto; None: its warm-up epochs alone.
    """
    done = len(epoch_times)
    steady = list(epoch_times[rule.warmup :])
    median = statistics.median(steady) if steady else None
    interval = median_interval(steady, rule.confidence) if steady else None
    half = None if interval is None or not median else (interval[1] - interval[0]) / 2.0 / median
    growing = {
        name: still_growing(peaks, rule.memory_window, rule.memory_tolerance) for name, peaks in memory.items() if peaks
    }
    growing = {name: rise for name, rise in growing.items() if rise is not None}
    auto = rule.target is None
    target, why = auto_target(rule.between, rule.margin) if auto else (rule.target, "")
    named = f"the auto target {100 * target:.3g}% ({why})" if auto else f"trainer.auto_target={rule.target:g}"
    pinned = half is not None and half < target
    need, start = math.inf, start_cost if start_cost is not None else float(rule.warmup)
    trend = material_drift(steady, target) if auto and half is not None else None
    if auto and half is not None and trend is None:
        need = allocated_epochs(start, within_sd(steady), rule.between.sd if rule.between else None)
    memory_held = f"; no memory peak above +{100 * rule.memory_tolerance:g}% in the last {rule.memory_window} epochs"
    if done >= rule.min_epochs and not growing and (pinned or len(steady) >= need):
        figure = (
            f"median {median:.4g} s +/- {100 * half:.2f}% ({100 * rule.confidence:g}%) over {len(steady)} steady epochs"
        )
        if pinned:
            return Decision(
                True, f"pinned after {done} epochs: {figure}, within {named}{memory_held}", median, half, target=target
            )
        return Decision(
            True,
            f"enough epochs after {done}: {figure}, past Kalibera and Jones' allocation of "
            f"{need:.1f} ({_allocation(start, steady, rule)}), so more epochs buy less than another run; "
            f"not within {named}{memory_held}",
            median,
            half,
            target=target,
        )
    if done < rule.max_epochs:
        return Decision(False, "", median, half, tuple(sorted(growing)), target)
    why_not: List[str] = []
    if growing:
        why_not.append(
            "memory still growing ("
            + ", ".join(
                f"{name} +{100 * rise:.1f}%" if math.isfinite(rise) else f"{name}: too few epochs to tell"
                for name, rise in sorted(growing.items())
            )
            + f" over the last {rule.memory_window} epochs)"
        )
    if not pinned and len(steady) < need:
        why_not.append(
            "median epoch time not pinned ("
            + (f"+/- {100 * half:.2f}%" if half is not None else "too few steady epochs for an interval")
            + f" > {named})"
        )
    if not pinned and trend is not None:
        why_not.append(f"epoch time still drifting ({100 * trend:+.2f}% an epoch, Mann-Kendall 5%)")
    return Decision(
        True,
        f"max_epochs={rule.max_epochs} reached: " + "; ".join(why_not or ["min_epochs"]),
        median,
        half,
        tuple(sorted(growing)),
        target,
    )


def _allocation(start: float, steady: Sequence[float], rule: StopRule) -> str:
    """The allocation's inputs, in words, for the stop reason."""
    noise = rule.between.describe() if rule.between else "between runs as much: no earlier runs of this cell"
    return f"a run's start costs {start:.1f} epochs; epochs scatter {100 * within_sd(steady):.1f}%, {noise}"


def read_between(client: Any, experiment_id: str, tags: Dict[str, str]) -> Optional[Between]:
    """The between-run noise of the cell a run with these `tags` measures, from the store's earlier finished,
    uncontended runs of the same kind and testbed (a study's runs; a wif-advise race's, whose cells are its
    own), read once before the run starts: the cell's own runs (one small query) and, while they are too few,
    the runs of the same sweep's earlier blocks (a second). A store that cannot answer costs the run its
    between-run evidence (the target falls back to the tie margin), never the run."""
    figures: Dict[str, Dict[str, float]] = {}  # cell -> run id -> figure
    try:
        same = [f"tags.`{k}` = '{tags[k]}'" for k in TESTBED_TAGS if k in tags and "'" not in tags[k]]
        for key in ("wif.cell", "wif.sweep_id"):
            if key == "wif.sweep_id" and len(figures.get(tags.get("wif.cell", ""), {})) > MIN_BETWEEN_DF:
                break
            kind = tags.get("wif.kind", "train").replace("'", "")  # a study's runs, or one wif-advise race's
            where = " and ".join(
                [
                    f"tags.`wif.kind` = '{kind}'",
                    "attributes.status = 'FINISHED'",
                    *same,
                    f"tags.`{key}` = '{tags.get(key, '').replace(chr(39), '')}'",
                ]
            )
            for run in client.search_runs(
                [experiment_id], where, max_results=HISTORY_RUNS, order_by=["attributes.start_time DESC"]
            ):
                figure = run.data.metrics.get("epoch_time_median_s")
                if figure and run.data.tags.get("wif.contended") != "true":
                    figures.setdefault(run.data.tags.get("wif.cell", "?"), {})[run.info.run_id] = figure
    except Exception as err:  # noqa: BLE001 - e.g. a busy store or a server gone for a moment
        log.warning("trainer.auto_target=auto: earlier runs unreadable (%s); no between-run noise used", err)
        return None
    return between_run_noise({c: list(runs.values()) for c, runs in figures.items()}, tags.get("wif.cell", ""))
