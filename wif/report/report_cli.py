"""`wif-report`: read the study's runs from MLflow, answer "who is faster" per fraction, write and log it.

Steps: read runs -> set apart the unusable ones -> per testbed (device, GPU, model; never pooled) and
fraction, summarize and compare -> write summary.csv, summary.md, PNGs -> log them as a `report` run.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Sequence

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from wif.measure.tracking import default_tracking_uri
from wif.report import copycost, document, tables
from wif.report import runs as runs_io
from wif.report.testbed import testbed_section
from wif.report.verdicts import RAM_COLUMNS, VRAM_COLUMNS, Verdicts


class _Parser(argparse.ArgumentParser):
    """Bad arguments in one line (and exit 2), not argparse's usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _margin(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--margin {text!r}: expected a share such as 0.02 or 2%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"--margin {text!r}: must lie in [0, 1) (0.02 is 2%)")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="wif-report",
        description="Who is faster, with confidence: tables, verdicts "
        "and plots from the study's training runs in MLflow, logged back as a 'report' run. Per fraction "
        "and testbed one model, log(epoch time) = setting + block, decides: speedups against the baseline "
        "with simultaneous intervals (Dunnett) and the set of settings that may be fastest (Hsu's MCB).",
    )
    p.add_argument(
        "--tracking-uri",
        default=default_tracking_uri(),
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db, as train.py)",
    )
    p.add_argument("--experiment", default=runs_io.DEFAULT_EXPERIMENT, help="experiment name (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("report"), help="output folder (default: ./report)")
    p.add_argument("--sweep-id", help="only runs of this sweep (tag wif.sweep_id)")
    p.add_argument(
        "--tag", action="append", default=[], metavar="KEY=VALUE", help="only runs with this tag; repeatable"
    )
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only runs started on or after this day (local time)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="only runs on this device")
    p.add_argument(
        "--baseline",
        help="the setting speedups are measured against (default: the one the runs name in "
        "tracking.baseline: a study's own, else baseline)",
    )
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level of intervals (default: 0.95)")
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the simultaneous tests against the baseline (default: 0.05)",
    )
    p.add_argument(
        "--margin",
        type=_margin,
        default=0.02,
        metavar="SHARE",
        help="practical tie: settings whose interval against the fastest stays within this share "
        "(0.02 or 2%%) are 'tied with the fastest' (default: 2%%)",
    )
    p.add_argument(
        "--statistic",
        choices=sorted(runs_io.STATISTICS),
        default="median",
        help="each run's figure: the median of its measured epochs, which one slow epoch cannot move, "
        "or their mean (default: median)",
    )
    p.add_argument(
        "--keep-contended",
        action="store_true",
        help="keep runs tagged wif.contended=true (other processes took CPU during their measured "
        "epochs) in the fit; by default they are left out and listed at the end",
    )
    p.add_argument(
        "--ram",
        choices=sorted(RAM_COLUMNS),
        default="pss",
        help="peak RAM figure for 'cheapest' and the trade-off plot (default: pss, shared pages once)",
    )
    p.add_argument(
        "--vram",
        choices=sorted(VRAM_COLUMNS),
        default="device",
        help="peak VRAM figure for 'cheapest' and the trade-off plot (default: device, as nvidia-smi)",
    )
    p.add_argument("--curves-fraction", type=float, help="fraction of the epoch-time curves (default: the largest)")
    p.add_argument(
        "--bound-source",
        default="fixed",
        help="data.source of the synthetic on-device upper-bound runs (default: %(default)s)",
    )
    p.add_argument("--no-log", action="store_true", help="do not log the report as a run in the experiment")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    atexit.register(gc.freeze)  # no collection at exit: 0.5 s of MLflow's and pandas' objects (wif.config.exits)
    args = build_parser().parse_args(argv)
    try:
        return _report(args)
    except runs_io.ReportInputError as error:
        print(f"wif-report: {error}", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1 or not 0 < args.alpha < 1:
        raise runs_io.ReportInputError("--confidence and --alpha must lie strictly between 0 and 1")
    client = runs_io.open_store(args.tracking_uri)
    run_filter = runs_io.RunFilter(args.sweep_id, runs_io.parse_tags(args.tag), args.since, args.device)
    try:
        every = runs_io.load_runs(client, args.experiment, run_filter)
        bandwidth = copycost.read_bandwidth(client, runs_io.experiment_id(client, args.experiment))
    except MlflowException as error:
        raise runs_io.ReportInputError(f"cannot read {args.tracking_uri}: {error.message}") from None
    value = runs_io.STATISTICS[args.statistic]
    if value == runs_io.MEDIAN and every[value].isna().all():
        print(
            "wif-report: these runs predate epoch_time_median_s; comparing run means (--statistic mean).",
            file=sys.stderr,
        )
        value = runs_io.MEAN
    every = copycost.add_copy_cost(every, bandwidth)  # a column only where wif-bandwidth measured the GPU
    every["excluded"] = runs_io.exclusion_reasons(every, value)
    excluded = every[every["excluded"] != ""]
    usable = every[every["excluded"] == ""]
    is_bound = usable["data_source"] == args.bound_source
    bound, used = usable[is_bound], usable[~is_bound]
    contended = used[used["contended"]]
    if not args.keep_contended:
        used = used[~used["contended"]]
    if used.empty:
        left_out = (
            ""
            if args.keep_contended
            else (f", {len(contended)} contended left out: --keep-contended keeps them" if len(contended) else "")
        )
        raise runs_io.ReportInputError(
            f"none of the {len(every)} training runs is a finished study run "
            f"({len(excluded)} excluded, {len(bound)} upper-bound runs{left_out})"
        )
    args.out.mkdir(parents=True, exist_ok=True)

    testbeds = sorted(used["testbed"].unique())
    sections = [
        testbed_section(
            client,
            args,
            value,
            used[used["testbed"] == testbed],
            bound,
            bandwidth,
            "" if len(testbeds) == 1 else "_" + re.sub(r"[^a-z0-9]+", "-", testbed.lower()).strip("-"),
        )
        for testbed in testbeds
    ]
    rows = [tables.csv_rows(s, section.runs) for section in sections for s in section.summaries]
    rules = Verdicts(args.alpha, args.ram, args.vram)
    thresholds = sorted(set(every["contended_pct"].dropna()))
    header = document.Header(
        args.experiment,
        args.tracking_uri,
        run_filter.to_mlflow(),
        len(every),
        len(bound),
        datetime.now().strftime("%Y-%m-%d %H:%M"),
        value,
        args.keep_contended,
        f"{thresholds[0]}%" if len(thresholds) == 1 else "the threshold",
    )
    pd.concat(rows, ignore_index=True).to_csv(args.out / "summary.csv", index=False)
    markdown = document.render(header, sections, excluded, contended, rules, args.confidence, images=True)
    (args.out / "summary.md").write_text(markdown)
    print(document.render(header, sections, excluded, contended, rules, args.confidence, images=False))
    print(f"\nWrote {args.out}/: summary.csv, summary.md and {sum(len(s.images) for s in sections)} plots.")
    if args.no_log:
        return 0
    try:
        run_id = _log_report(client, args.experiment, args.out, run_filter)
    except (MlflowException, OSError) as error:
        print(f"wif-report: the files are written, but logging them to MLflow failed: {error}", file=sys.stderr)
        return 1
    print(f"Logged them as artifacts of run 'report' ({run_id}) in experiment {args.experiment!r}.")
    return 0


def _log_report(client: MlflowClient, experiment: str, out: Path, run_filter: runs_io.RunFilter) -> str:
    """A `report` run holding the output folder, so the answer is one click away in the MLflow UI."""
    run = client.create_run(
        runs_io.experiment_id(client, experiment),
        run_name="report",
        tags={runs_io.KIND_TAG: "report", "wif.report.filter": run_filter.to_mlflow()},
    )
    try:
        client.log_artifacts(run.info.run_id, str(out))
    except (MlflowException, OSError):
        client.set_terminated(run.info.run_id, "FAILED")
        raise
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
