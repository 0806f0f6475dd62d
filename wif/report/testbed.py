"""One testbed's section of `wif-report`: its per-fraction summaries, the upper bound, the curves and the plots.

Testbeds (device, GPU, model) are never pooled. A fraction whose runs are one race's gets the race's own answer,
replayed from its runs: see NOTE [ A race's own answer ].
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.decide import decision, model
from wif.decide.race import FractionState, RaceRules, replay
from wif.measure import names
from wif.report import copycost, figures, stats, tables
from wif.report import runs as runs_io
from wif.report.verdicts import RAM_COLUMNS, VRAM_COLUMNS

SUMMARY_METRICS = [m for m in runs_io.FINAL_METRICS if m not in runs_io.STATISTICS.values()]


@dataclass(frozen=True)
class Study:
    """What every testbed's section shares: the store, the options, the run figure and the reference runs."""

    client: MlflowClient
    args: argparse.Namespace
    value: str  # the run figure compared: epoch_time_median_s or epoch_time_mean_s
    bound: pd.DataFrame  # the synthetic on-device upper-bound runs, every testbed's
    bandwidth: pd.DataFrame  # the wif-bandwidth runs (wif.report.copycost)


def testbed_section(study: Study, runs: pd.DataFrame, suffix: str) -> tables.Section:
    """One testbed: summaries per fraction and every plot, files named with `suffix`."""
    args = study.args
    testbed = runs["testbed"].iloc[0]
    at_bw = copycost.COLUMN in runs and runs[copycost.COLUMN].notna().any()
    metrics = SUMMARY_METRICS + ([copycost.COLUMN] if at_bw else [])
    summaries = [_as_raced(study, group, _summary(study, group, metrics)) for _, group in runs.groupby("fraction")]
    for s in summaries if at_bw else []:
        s.notes.append(copycost.note(runs[runs["fraction"] == s.fraction], study.bandwidth))
    curve_fraction = args.curves_fraction or max(s.fraction for s in summaries)
    inputs = figures.PlotInputs(
        testbed=testbed,
        summaries=summaries,
        runs=runs,
        curves=_curves(study.client, runs[runs["fraction"] == curve_fraction]),
        curve_fraction=curve_fraction,
        ram_column=RAM_COLUMNS[args.ram],
        vram_column=VRAM_COLUMNS[args.vram],
        confidence=args.confidence,
        alpha=args.alpha,
    )
    pngs = figures.write_plots(args.out, suffix, inputs)
    return tables.Section(testbed=testbed, runs=runs, summaries=summaries, images=[p.name for p in pngs])


def _summary(study: Study, runs: pd.DataFrame, metrics: list[str]) -> stats.FractionSummary:
    """One fraction's summary, set against the upper bound of its testbed."""
    args = study.args
    how = stats.Comparison(
        baseline=args.baseline or runs_io.baseline_of(runs),
        value=study.value,
        confidence=args.confidence,
        alpha=args.alpha,
        margin=args.margin,
    )
    bound = _bound_figures(study.bound, runs["testbed"].iloc[0], runs)
    return stats.summarize_fraction(runs, metrics, how=how, bound=bound)


def _as_raced(study: Study, runs: pd.DataFrame, s: stats.FractionSummary) -> stats.FractionSummary:
    """A fraction of one race's runs gets the race's answer (NOTE [ A race's own answer ]); any other, as is."""
    race_id = race_of(runs)
    if race_id is None:
        return s
    record = record_of(study.client, runs_io.experiment_id(study.client, study.args.experiment), race_id)
    if record is None:
        s.notes.append(
            f"These runs come from race {race_id[:8]}, whose own run (wif.kind=race) is gone: they are "
            "compared as a fixed grid, which ignores that the race looked after every block."
        )
        return s
    if record.budget:  # sweep.budget_min: what the budget let the race decide, and what finishing would cost
        s.notes.append(f"The race ran under a time budget: {record.budget}.")
    s.race = race_answer(runs, study.value, record)
    s.table = raced_table(s.table, s.fit, s.race)
    return s


def _bound_figures(bound: pd.DataFrame, testbed: str, runs: pd.DataFrame) -> stats.Bound:
    """The upper-bound runs' mean throughput and mean step time, as `stats.Bound` says; None where there are none."""
    same = bound[(bound["testbed"] == testbed) & bound["batch_size"].isin(runs["batch_size"].mode())]
    throughput = same[names.THROUGHPUT_MEAN_IMG_S]
    img_s = float(throughput.mean()) if throughput.notna().any() else None
    step = same.loc[same["fraction"] == runs["fraction"].iloc[0], names.COMPUTE_MEAN_S]
    return stats.Bound(img_s=img_s, compute_s=float(step.mean()) if step.notna().any() else None)


def _curves(client: MlflowClient, runs: pd.DataFrame) -> pd.DataFrame:
    """Per-epoch times of the given runs, labelled by loader (the only place histories are read)."""
    history = runs_io.metric_histories(client, runs["run_id"], names.EPOCH_TIME_S)
    return history.merge(runs[["run_id", "loader"]], on="run_id")


# NOTE [ A race's own answer ]
# A race looks after every block, spends its error over those looks and stops the settings it drops early. A
# fresh 95% comparison of its runs would ignore both, and could name another possibly-fastest set than the race
# ended with. So where a fraction's runs all come from one race, the race gives the report's verdict and 'vs
# fastest' column: the same `replay` (`wif.decide.race`) the race uses on resume, on the same runs.


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


def race_answer(runs: pd.DataFrame, value: str, record: RaceRecord) -> RaceAnswer:
    """The race's state after its last block at this fraction, recomputed from the runs."""
    fraction = float(runs["fraction"].iloc[0])
    blocks = int(runs["block"].astype(int).max()) + 1
    state = replay(runs, value, record.rules, {fraction: sorted(runs["loader"].unique())}, blocks)[fraction]
    return RaceAnswer(race_id=record.race_id, rules=record.rules, state=state, blocks=blocks, same_as=record.same_as)


def raced_table(table: pd.DataFrame, fit: model.Fit, race: RaceAnswer) -> pd.DataFrame:
    """The 'vs fastest' columns as the race decided them: the last look's, or the bound a setting was dropped with."""
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
