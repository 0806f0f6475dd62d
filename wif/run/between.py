"""A cell's between-run noise: how much its figure scatters from run to run, seen in earlier finished runs.

trainer.auto_target=auto pins a run's figure within half of that noise where it is larger than the report's
tie margin (`wif.run.stopping.auto_target`). It is read from the store once, before the run starts.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence

from wif.measure import names

log = logging.getLogger("wif")
MIN_BETWEEN_DF = 2  # degrees of freedom a between-run sd needs (an sd of 2 runs ranges over a factor of 30)
# An earlier run of the same testbed shares these tags; the host stands in for wif.gpu, set once a run has started.
TESTBED_TAGS = (names.TAG_DEVICE, names.TAG_HOST, names.TAG_MODEL, names.TAG_STEP, names.TAG_ENGINE, names.TAG_TRANSFER)
HISTORY_RUNS = 200  # the newest earlier runs read a query (MLflow loads each whole: ~8 ms a run on SQLite)


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
    """The cell's between-run noise from earlier runs' figures, given as cell -> figures.

    That is its own sd once it has MIN_BETWEEN_DF + 1 runs. Else it is the sd pooled over every cell with two
    runs or more: the same testbed jitters alike from run to run more than cells differ in it. Else None.
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

    It reads the store's earlier finished, uncontended runs of the same kind and testbed: a study's runs, or
    one wif-advise race's, whose cells are its own. The cell's own runs come first, in one small query. While
    they are too few, a second query reads the same sweep's earlier blocks. A store that cannot answer costs
    the run its between-run evidence, never the run: the target falls back to the tie margin.
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
