"""One testbed's section of `wif-report`: its per-fraction summaries (a race's own answer where the runs are one
race's), the upper bound they are measured against, the epoch-time curves and every plot.

Apart from the command (`report_cli`), which reads the runs, sets the unusable ones apart and writes the
files: this is what is done for each testbed (device, GPU, model) once its runs are known; never pooled.
"""

from __future__ import annotations

import argparse

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.report import copycost, figures, raced, stats, tables
from wif.report import runs as runs_io
from wif.report.verdicts import RAM_COLUMNS, VRAM_COLUMNS

SUMMARY_METRICS = [m for m in runs_io.FINAL_METRICS if m not in runs_io.STATISTICS.values()]


def testbed_section(
    client: MlflowClient,
    args: argparse.Namespace,
    value: str,
    runs: pd.DataFrame,
    bound: pd.DataFrame,
    bandwidth: pd.DataFrame,
    suffix: str,
) -> tables.Section:
    """One testbed: summaries per fraction and every plot, files named with `suffix`."""
    testbed = runs["testbed"].iloc[0]
    at_bw = copycost.COLUMN in runs and runs[copycost.COLUMN].notna().any()
    summaries = [
        _as_raced(
            client,
            args.experiment,
            value,
            group,
            stats.summarize_fraction(
                group,
                args.baseline or runs_io.baseline_of(group),
                value,
                SUMMARY_METRICS + ([copycost.COLUMN] if at_bw else []),
                args.confidence,
                args.alpha,
                args.margin,
                *_bound_figures(bound, testbed, group),
            ),
        )
        for _, group in runs.groupby("fraction")
    ]
    for s in summaries if at_bw else []:
        s.notes.append(copycost.note(runs[runs["fraction"] == s.fraction], bandwidth))
    curve_fraction = args.curves_fraction or max(s.fraction for s in summaries)
    curves = _curves(client, runs[runs["fraction"] == curve_fraction])
    pngs = figures.write_plots(
        args.out,
        suffix,
        testbed,
        summaries,
        runs,
        curves,
        curve_fraction,
        (RAM_COLUMNS[args.ram], VRAM_COLUMNS[args.vram]),
        args.confidence,
        args.alpha,
    )
    return tables.Section(testbed, runs, summaries, [p.name for p in pngs])


def _as_raced(
    client: MlflowClient, experiment: str, value: str, runs: pd.DataFrame, s: stats.FractionSummary
) -> stats.FractionSummary:
    """A fraction whose runs are one race's gets the race's answer (wif.report.raced); any other is as is."""
    race_id = raced.race_of(runs)
    if race_id is None:
        return s
    record = raced.record_of(client, runs_io.experiment_id(client, experiment), race_id)
    if record is None:
        s.notes.append(
            f"These runs come from race {race_id[:8]}, whose own run (wif.kind=race) is gone: they are "
            "compared as a fixed grid, which ignores that the race looked after every block."
        )
        return s
    rules, same_as, budget = record
    if budget:  # sweep.budget_min: what the budget let the race decide, and what finishing would cost
        s.notes.append(f"The race ran under a time budget: {budget}.")
    s.race = raced.answer(runs, value, rules, race_id, same_as)
    s.table = raced.apply(s.table, s.fit, s.race)
    return s


def _bound_figures(bound: pd.DataFrame, testbed: str, runs: pd.DataFrame) -> tuple[float | None, float | None]:
    """The upper-bound runs' mean throughput (same testbed and batch size) and mean step time (the same, at the
    runs' fraction: as many batches an epoch); None where there are none."""
    same = bound[(bound["testbed"] == testbed) & bound["batch_size"].isin(runs["batch_size"].mode())]
    img_s = float(same["throughput_mean_img_s"].mean()) if same["throughput_mean_img_s"].notna().any() else None
    step = same.loc[same["fraction"] == runs["fraction"].iloc[0], "compute_mean_s"]
    return img_s, float(step.mean()) if step.notna().any() else None


def _curves(client: MlflowClient, runs: pd.DataFrame) -> pd.DataFrame:
    """Per-epoch times of the given runs, labelled by loader (the only place histories are read)."""
    history = runs_io.metric_histories(client, runs["run_id"], "epoch_time_s")
    return history.merge(runs[["run_id", "loader"]], on="run_id")
