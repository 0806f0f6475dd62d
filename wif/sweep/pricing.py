"""A sweep's price before it starts, for wif-plan: the fixed grid and the cheap way, race + auto.

A run costs its job's overhead plus its epochs, priced as a budgeted sweep prices it (wif.sweep.prices): from
the testbed's earlier runs, or from probes of its settings. The cheap way's share of the grid's runs is what
earlier races ran (`race_share`), else ASSUMED_RACE_SHARE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.sweep.prices import Job, Prices
from wif.sweep.probe import find_runs

ASSUMED_RACE_SHARE = 0.4  # of the fixed grid's runs, when the store holds no race: docs/race.md measured 0.38


@dataclass
class Price:
    runs: int
    epochs: int
    seconds: float


class Shape(NamedTuple):
    """A cell's data: its fraction, and its training batches an epoch."""

    fraction: float
    batches: int


@dataclass(frozen=True)
class Basis:
    """What the cheap way's price assumes, beside the fixed grid's epochs."""

    epochs: int  # a fixed-grid run's epochs
    auto_epochs: float  # a trainer.epochs=auto run's epochs
    auto_seen: bool  # auto_epochs is what earlier auto runs took, not trainer.min_epochs
    share: Optional[float]  # the share of the grid's runs earlier races ran; None: no race in the store

    @property
    def runs_share(self) -> float:
        return self.share if self.share is not None else ASSUMED_RACE_SHARE


def price(
    cells: Dict[str, int], shapes: Dict[str, Shape], prices: Prices, epochs: float, runs_share: float = 1.0
) -> Optional[Price]:
    """The sweep's runs, epochs and seconds, each run priced as a budgeted sweep prices it; None where none is.

    Args:
        cells: each cell's repeats.
        shapes: each cell's fraction and training batches an epoch.
        prices: the earlier runs' or the probes' prices; a cell with neither is priced at the median cell.
        epochs: a run's epochs (under trainer.epochs=auto, those it is expected to take).
        runs_share: the share of the runs that run.
    """
    runs = seconds = 0.0
    for cell, repeats in cells.items():
        fraction, batches = shapes[cell]
        cost = prices.cost(Job(key=(), cell=cell, fraction=fraction, block=0, batches=batches))  # any block: same price
        if cost is None:
            return None
        runs += repeats * runs_share
        seconds += repeats * runs_share * cost.seconds(epochs)
    return Price(round(runs), round(runs * epochs), seconds)


def race_share(client: MlflowClient, experiment: str) -> Optional[float]:
    """The share of its fixed grid's runs the store's finished races ran (wif.kind=race records)."""
    ran = planned = 0
    races = f"tags.`{names.TAG_KIND}` = 'race' and attributes.status = 'FINISHED'"
    for race in find_runs(client, experiment, races):
        p = race.data.params
        runs = client.search_runs(
            [race.info.experiment_id],
            f"tags.`{names.TAG_RACE_ID}` = '{race.data.tags[names.TAG_RACE_ID]}' and tags.`{names.TAG_KIND}` = 'train'",
            max_results=50_000,
        )
        ran += len(runs)
        planned += int(p.get("race.cells", 0)) * int(p.get("race.max_blocks", 0))
    return ran / planned if planned else None
