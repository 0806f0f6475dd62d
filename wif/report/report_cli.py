"""`wif-report`: read the study's runs from MLflow, answer "who is faster" per fraction, write and log it.

It sets the unusable runs apart. It summarizes and compares per testbed (device, GPU, model; never pooled)
and fraction. It writes summary.csv, summary.md and PNGs, and logs them as a `report` run.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Sequence

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from wif.measure import names
from wif.report import copycost, document, tables
from wif.report import runs as runs_io
from wif.report.options import build_parser
from wif.report.testbed import Study, testbed_section
from wif.report.verdicts import Verdicts


def main(argv: Sequence[str] | None = None) -> int:
    """`wif-report`: 0 when the report is written (and logged), 1 when logging it failed, 2 on bad input."""
    atexit.register(gc.freeze)  # no collection at exit: 0.5 s of MLflow's and pandas' objects (wif.config.exits)
    args = build_parser().parse_args(argv)
    try:
        return _report(args)
    except runs_io.ReportInputError as error:
        print(f"wif-report: {error}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class _Read:
    """What the store gave: the client, the filter it was read with, every training run and the bandwidth runs."""

    client: MlflowClient
    run_filter: runs_io.RunFilter
    every: pd.DataFrame
    bandwidth: pd.DataFrame


@dataclass(frozen=True)
class _Sorted:
    """The runs read, sorted: every one with why it is excluded, and the parts each use of them takes."""

    every: pd.DataFrame  # with the columns `excluded` and, where wif-bandwidth measured the GPU, the copy cost
    excluded: pd.DataFrame
    bound: pd.DataFrame  # the synthetic on-device upper-bound runs
    used: pd.DataFrame  # the study's runs the statistics take
    contended: pd.DataFrame  # of the study's runs, those that shared the machine


def _report(args: argparse.Namespace) -> int:
    """Read the runs, write the report's files and print it, then log them as a `report` run."""
    if not 0 < args.confidence < 1 or not 0 < args.alpha < 1:
        raise runs_io.ReportInputError("--confidence and --alpha must lie strictly between 0 and 1")
    read = _read_runs(args)
    value = _run_figure(args, read.every)
    runs = _sort_runs(args, read, value)
    args.out.mkdir(parents=True, exist_ok=True)
    study = Study(client=read.client, args=args, value=value, bound=runs.bound, bandwidth=read.bandwidth)
    testbeds = sorted(runs.used["testbed"].unique())
    sections = [
        testbed_section(study, runs.used[runs.used["testbed"] == testbed], _file_suffix(testbed, len(testbeds)))
        for testbed in testbeds
    ]
    _write(args, _document(args, read, runs, value, sections))
    if args.no_log:
        return 0
    try:
        run_id = _log_report(read.client, args.experiment, args.out, read.run_filter)
    except (MlflowException, OSError) as error:
        print(f"wif-report: the files are written, but logging them to MLflow failed: {error}", file=sys.stderr)
        return 1
    print(f"Logged them as artifacts of run 'report' ({run_id}) in experiment {args.experiment!r}.")
    return 0


def _read_runs(args: argparse.Namespace) -> _Read:
    """Every training run the filter lets through, whatever its status, and the experiment's bandwidth runs."""
    client = runs_io.open_store(args.tracking_uri)
    run_filter = runs_io.RunFilter(
        sweep_id=args.sweep_id, tags=runs_io.parse_tags(args.tag), since=args.since, device=args.device
    )
    try:
        every = runs_io.load_runs(client, args.experiment, run_filter)
        bandwidth = copycost.read_bandwidth(client, runs_io.experiment_id(client, args.experiment))
    except MlflowException as error:
        raise runs_io.ReportInputError(f"cannot read {args.tracking_uri}: {error.message}") from None
    return _Read(client=client, run_filter=run_filter, every=every, bandwidth=bandwidth)


def _run_figure(args: argparse.Namespace, every: pd.DataFrame) -> str:
    """The run figure compared: the one --statistic names, else the mean where no run has a median."""
    value = runs_io.STATISTICS[args.statistic]
    if value == runs_io.MEDIAN and every[value].isna().all():
        print(
            "wif-report: these runs predate epoch_time_median_s; comparing run means (--statistic mean).",
            file=sys.stderr,
        )
        value = runs_io.MEAN
    return value


def _sort_runs(args: argparse.Namespace, read: _Read, value: str) -> _Sorted:
    """The runs set apart from those the statistics take; a ReportInputError when none is left."""
    every = copycost.add_copy_cost(read.every, read.bandwidth)  # a column only where wif-bandwidth measured the GPU
    every["excluded"] = runs_io.exclusion_reasons(every, value)
    excluded = every[every["excluded"] != ""]
    usable = every[every["excluded"] == ""]
    is_bound = usable["data_source"] == args.bound_source
    bound, used = usable[is_bound], usable[~is_bound]
    contended = used[used["contended"]]
    if not args.keep_contended:
        used = used[~used["contended"]]
    if used.empty:
        none_left_out = args.keep_contended or contended.empty
        left_out = "" if none_left_out else f", {len(contended)} contended left out: --keep-contended keeps them"
        raise runs_io.ReportInputError(
            f"none of the {len(every)} training runs is a finished study run "
            f"({len(excluded)} excluded, {len(bound)} upper-bound runs{left_out})"
        )
    return _Sorted(every=every, excluded=excluded, bound=bound, used=used, contended=contended)


def _file_suffix(testbed: str, testbeds: int) -> str:
    """What a testbed's plot files end in: nothing when it is the only one."""
    return "" if testbeds == 1 else "_" + re.sub(r"[^a-z0-9]+", "-", testbed.lower()).strip("-")


def _document(
    args: argparse.Namespace, read: _Read, runs: _Sorted, value: str, sections: list[tables.Section]
) -> document.Document:
    """The report's page: its header, the testbeds' sections and the runs set apart.

    Args:
        args: the command's options.
        read: what the store gave.
        runs: the runs read, sorted.
        value: the run figure compared.
        sections: one per testbed.
    """
    thresholds = sorted(set(runs.every["contended_pct"].dropna()))
    header = document.Header(
        experiment=args.experiment,
        tracking_uri=args.tracking_uri,
        filter=read.run_filter.to_mlflow(),
        runs_read=len(runs.every),
        bound_runs=len(runs.bound),
        generated=datetime.now().strftime("%Y-%m-%d %H:%M"),
        statistic=value,
        contended_kept=args.keep_contended,
        contended_pct=f"{thresholds[0]}%" if len(thresholds) == 1 else "the threshold",
    )
    return document.Document(
        header=header,
        sections=sections,
        excluded=runs.excluded,
        contended=runs.contended,
        rules=Verdicts(alpha=args.alpha, ram=args.ram, vram=args.vram),
        confidence=args.confidence,
    )


def _write(args: argparse.Namespace, doc: document.Document) -> None:
    """Write summary.csv and summary.md, and print the report as the terminal shows it."""
    rows = [tables.csv_rows(s, section.runs) for section in doc.sections for s in section.summaries]
    pd.concat(rows, ignore_index=True).to_csv(args.out / "summary.csv", index=False)
    (args.out / "summary.md").write_text(document.render(doc, images=True))
    print(document.render(doc, images=False))
    print(f"\nWrote {args.out}/: summary.csv, summary.md and {sum(len(s.images) for s in doc.sections)} plots.")


def _log_report(client: MlflowClient, experiment: str, out: Path, run_filter: runs_io.RunFilter) -> str:
    """A `report` run holding the output folder, so the answer is one click away in the MLflow UI; its id.

    Args:
        client: the store.
        experiment: the experiment's name.
        out: the folder the report was written to.
        run_filter: what narrowed the runs read, kept as a tag.
    """
    run = client.create_run(
        runs_io.experiment_id(client, experiment),
        run_name="report",
        tags={names.TAG_KIND: "report", "wif.report.filter": run_filter.to_mlflow()},
    )
    try:
        client.log_artifacts(run.info.run_id, str(out))
    except (MlflowException, OSError):
        client.set_terminated(run.info.run_id, "FAILED")
        raise
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
