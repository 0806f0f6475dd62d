"""A raced sweep's answer, read back: the race replayed from its runs with its own rules (`wif.decide.race`).

A race looks after every block, spends its error over those looks and stops the settings it drops early.
A fresh 95% comparison of its runs would ignore both, and could name another possibly-fastest set than the
race ended with. So where a fraction's runs all come from one race, the race gives the report's verdict and
'vs fastest' column. It is the same `replay` the race uses on resume, on the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.decide import decision, model
from wif.decide.race import FractionState, RaceRules, replay
from wif.measure import names


@dataclass(frozen=True)
class RaceAnswer:
    """Where a race ended at one fraction, and the rules it ran by."""

    race_id: str
    rules: RaceRules
    state: FractionState
    blocks: int  # blocks the race ran at this fraction
    same_as: str = ""  # 'pin=baseline pin_nb=baseline': options that ran as another (same code on a CPU)

    def describe(self) -> str:
        """How 'vs fastest' was decided, for the report's notes."""
        r = self.rules
        ended = self.state.settled or "not finished: the same command resumes it"
        merged = f"; these ran as another, the same code on a CPU: {self.same_as.replace('=', ' as ')}"
        return (
            f"the race's (race {self.race_id[:8]}: Hsu's MCB at {100 * r.look_confidence:.2f}% at each look, "
            f"blocks {r.min_blocks} to {r.max_blocks}, so {100 * r.confidence:.0f}% over all {r.looks} looks; "
            f"ties within {r.margin:.0%}; {self.blocks} blocks run, {ended}; a dropped setting keeps the bound "
            f"of the look that dropped it{merged if self.same_as else ''})"
        )


class RaceRecord(NamedTuple):
    """What a race's own MLflow run (wif.kind=race) says about it."""

    race_id: str
    rules: RaceRules
    same_as: str  # who ran as whom: 'pin=baseline ...'
    budget: str  # how its time budget ended (tag wif.budget.ended); '' without a budget


def race_of(runs: pd.DataFrame) -> str | None:
    """The race these runs all come from, or None (not raced, or runs of several sweeps mixed)."""
    ids = runs["race_id"].dropna().unique() if "race_id" in runs else []
    return str(ids[0]) if len(ids) == 1 and runs["race_id"].notna().all() else None


def record_of(client: MlflowClient, experiment_id: str, race_id: str) -> RaceRecord | None:
    """The rules a race ran with, from its own MLflow run; None when that run is gone."""
    found = client.search_runs(
        [experiment_id],
        f"tags.`{names.TAG_KIND}` = 'race' and tags.`{names.TAG_RACE_ID}` = '{race_id}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not found:
        return None
    p = found[0].data.params
    rules = RaceRules(
        min_blocks=int(p["race.min_blocks"]),
        max_blocks=int(p["race.max_blocks"]),
        margin=float(p["race.margin"]),
        confidence=float(p["race.confidence"]),
    )
    tags = found[0].data.tags
    return RaceRecord(
        race_id=race_id,
        rules=rules,
        same_as=tags.get("wif.race.same_as", ""),
        budget=tags.get("wif.budget.ended", ""),
    )


def answer(runs: pd.DataFrame, value: str, record: RaceRecord) -> RaceAnswer:
    """The race's state after its last block at this fraction, recomputed from the runs."""
    fraction = float(runs["fraction"].iloc[0])
    blocks = int(runs["block"].astype(int).max()) + 1
    state = replay(runs, value, record.rules, {fraction: sorted(runs["loader"].unique())}, blocks)[fraction]
    return RaceAnswer(race_id=record.race_id, rules=record.rules, state=state, blocks=blocks, same_as=record.same_as)


def apply(table: pd.DataFrame, fit: model.Fit, race: RaceAnswer) -> pd.DataFrame:
    """The table's 'vs fastest' columns as the race decided them.

    Settings left in the race get its final look's MCB; each dropped setting keeps the bound it was dropped with.
    """
    out = table.copy()
    final = decision.columns(fit, "", race.rules.look_confidence, race.rules.margin)
    vs_best = decision.VS_BEST
    for name in out.index:
        if name in race.state.dropped:
            at_least = race.state.dropped[name]
            out.loc[
                name,
                ["possibly_fastest", "slower_at_least", "tied", "clearly_slower", "slower_in_practice", "undecided"],
            ] = [False, at_least, False, True, at_least > 1 + race.rules.margin, False]
        elif name in final.index:
            out.loc[name, vs_best] = final.loc[name, vs_best].to_numpy()
            out.loc[name, "possibly_fastest"] = name in race.state.alive  # the race keeps all not shown slower
    return out
