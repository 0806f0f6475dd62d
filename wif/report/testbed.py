"""One testbed's section of `wif-report`: its per-fraction summaries, the upper bound, the curves and the plots.

A fraction whose runs are one race's gets the race's own answer. The command (`report_cli`) reads the runs,
sets the unusable ones apart and writes the files. This is what is done for each testbed (device, GPU, model)
once its runs are known; testbeds are never pooled.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.report import copycost, figures, raced, stats, tables
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
    """A fraction whose runs are one race's gets the race's answer (wif.report.raced); any other is as is."""
    race_id = raced.race_of(runs)
    if race_id is None:
        return s
    record = raced.record_of(study.client, runs_io.experiment_id(study.client, study.args.experiment), race_id)
    if record is None:
        s.notes.append(
            f"These runs come from race {race_id[:8]}, whose own run (wif.kind=race) is gone: they are "
            "compared as a fixed grid, which ignores that the race looked after every block."
        )
        return s
    if record.budget:  # sweep.budget_min: what the budget let the race decide, and what finishing would cost
        s.notes.append(f"The race ran under a time budget: {record.budget}.")
    s.race = raced.answer(runs, study.value, record)
    s.table = raced.apply(s.table, s.fit, s.race)
    return s


def _bound_figures(bound: pd.DataFrame, testbed: str, runs: pd.DataFrame) -> stats.Bound:
    """The upper-bound runs' mean throughput and mean step time; None where there are none.

    Both are taken over the bound runs of the same testbed and batch size. The step time is taken at the runs'
    fraction too: as many batches an epoch.
    """
    same = bound[(bound["testbed"] == testbed) & bound["batch_size"].isin(runs["batch_size"].mode())]
    throughput = same[names.THROUGHPUT_MEAN_IMG_S]
    img_s = float(throughput.mean()) if throughput.notna().any() else None
    step = same.loc[same["fraction"] == runs["fraction"].iloc[0], names.COMPUTE_MEAN_S]
    return stats.Bound(img_s=img_s, compute_s=float(step.mean()) if step.notna().any() else None)


def _curves(client: MlflowClient, runs: pd.DataFrame) -> pd.DataFrame:
    """Per-epoch times of the given runs, labelled by loader (the only place histories are read)."""
    history = runs_io.metric_histories(client, runs["run_id"], names.EPOCH_TIME_S)
    return history.merge(runs[["run_id", "loader"]], on="run_id")
