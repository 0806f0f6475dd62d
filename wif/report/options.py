"""The options of `wif-report`, in the order --help lists them: the store, the filter, the comparison, the output."""

from __future__ import annotations

import argparse
from pathlib import Path

from wif.measure.tracking import default_tracking_uri
from wif.report import runs as runs_io
from wif.report.verdicts import RAM_COLUMNS, VRAM_COLUMNS


class _Parser(argparse.ArgumentParser):
    """Bad arguments in one line (and exit 2), not argparse's usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _margin(text: str) -> float:
    """--margin as a share: 0.02 or 2%, in [0, 1)."""
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--margin {text!r}: expected a share such as 0.02 or 2%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"--margin {text!r}: must lie in [0, 1) (0.02 is 2%)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command's options, in the order --help lists them."""
    p = _Parser(
        prog="wif-report",
        description="Who is faster, with confidence: tables, verdicts "
        "and plots from the study's training runs in MLflow, logged back as a 'report' run. Per fraction "
        "and testbed one model, log(epoch time) = setting + block, decides: speedups against the baseline "
        "with simultaneous intervals (Dunnett) and the set of settings that may be fastest (Hsu's MCB).",
    )
    _add_store_arguments(p)
    _add_filter_arguments(p)
    _add_comparison_arguments(p)
    _add_output_arguments(p)
    return p


def _add_store_arguments(p: argparse.ArgumentParser) -> None:
    """Where the runs are read from and the files written to."""
    p.add_argument(
        "--tracking-uri",
        default=default_tracking_uri(),
        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db, as train.py)",
    )
    p.add_argument("--experiment", default=runs_io.DEFAULT_EXPERIMENT, help="experiment name (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("report"), help="output folder (default: ./report)")


def _add_filter_arguments(p: argparse.ArgumentParser) -> None:
    """Which training runs are read."""
    p.add_argument("--sweep-id", help="only runs of this sweep (tag wif.sweep_id)")
    p.add_argument(
        "--tag", action="append", default=[], metavar="KEY=VALUE", help="only runs with this tag; repeatable"
    )
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only runs started on or after this day (local time)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="only runs on this device")


def _add_comparison_arguments(p: argparse.ArgumentParser) -> None:
    """How the settings are compared: against what, on which figure, at which levels, with which runs."""
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


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """What the tables and plots show, which runs are the upper bound, and whether the report is logged."""
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
