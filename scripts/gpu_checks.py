"""What the GPU step issue asks a lent GPU to show, read from the store the session brought back:

- each advice (wif.kind=advise, its parent run): the limit it named, the GPU's busy share within the step,
  whether it called the step launch-bound, its interference (how much longer the step took beside the loader
  than replayed) in seconds an epoch, its pick;
- at each fraction with study runs of both `baseline` and `gpu_resident`: the gap between them, in the step
  (compute_mean_s) and in the epoch, and the advice's interference at that fraction against the step's gap
  ("within 25%": the issue's test).

    python scripts/gpu_checks.py [--tracking-uri URI] [--experiment NAME]

Reads only; prints a few lines. Exit 0 whatever the figures say; 2 where the store has neither.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.report.runs import DEFAULT_EXPERIMENT, ReportInputError, RunFilter, experiment_id, load_runs, open_store

WITHIN = 0.25  # the GPU step issue's test: the interference within 25% of the measured gap


def advices(client: MlflowClient, experiment: str) -> pd.DataFrame:
    """One row per advice's parent run: its fraction, device, limit and figures."""
    exp = experiment_id(client, experiment)
    rows = []
    for run in client.search_runs([exp], "tags.`wif.advise_role` = 'parent'", max_results=1000):
        m, t, p = run.data.metrics, run.data.tags, run.data.params
        measure = client.search_runs(  # the measuring run knows the device it ran on and the script, if any
            [exp], f"tags.`wif.advise_id` = '{t['wif.advise_id']}' and tags.`wif.advise_role` = 'measure'"
        )
        mt = measure[0].data.tags if measure else {}
        rows.append(
            {
                "fraction": float(p.get("data.fraction", "nan")),
                "device": mt.get("wif.device", "?"),
                "script": mt.get("wif.script", ""),  # wif-advise -- COMMAND: not the study's workload
                "limit": t.get("wif.advise.limit", ""),
                "pick": t.get("wif.advise.pick", ""),
                **{k: m.get(k, math.nan) for k in ("interference", "interference_s", "gpu_busy_step", "launch_bound")},
                "status": run.info.status,
            }
        )
    return pd.DataFrame(rows)


def gaps(runs: pd.DataFrame) -> Dict[Tuple[str, float], Dict[str, float]]:
    """Per device and fraction with both settings' finished runs: the gaps between their mean step and epoch."""
    done = runs[(runs["status"] == "FINISHED") & (runs["data_source"] != "fixed")]
    out: Dict[Tuple[str, float], Dict[str, float]] = {}
    for (device, fraction), group in done.groupby(["device", "fraction"]):
        by = group.groupby("loader")[["compute_mean_s", "epoch_time_median_s"]].mean()
        if {"baseline", "gpu_resident"} <= set(by.index):
            b, r = by.loc["baseline"], by.loc["gpu_resident"]
            out[(str(device), float(fraction))] = {
                "step_gap_s": b["compute_mean_s"] - r["compute_mean_s"],
                "epoch_gap_s": b["epoch_time_median_s"] - r["epoch_time_median_s"],
                "baseline_epoch_s": b["epoch_time_median_s"],
            }
    return out


def verdict(interference_s: float, step_gap_s: float) -> str:
    """The issue's test in words: the advice's interference against the measured step gap."""
    if not step_gap_s > 0:
        return f"the measured step gap is {step_gap_s:.3f} s: nothing to compare"
    ratio = interference_s / step_gap_s
    return f"{ratio:.2f} of the step gap: {'within' if abs(ratio - 1) <= WITHIN else 'NOT within'} {WITHIN:.0%}"


def lines(advice: pd.DataFrame, measured: Dict[Tuple[str, float], Dict[str, float]]) -> List[str]:
    out = []
    for _, a in advice.iterrows():
        busy = "n/a" if math.isnan(a["gpu_busy_step"]) else f"{a['gpu_busy_step']:.0%}"
        launch = "launch-bound" if a["launch_bound"] == 1 else "not launch-bound" if busy != "n/a" else "no GPU figure"
        what = a["script"] or f"the study at fraction {a['fraction']:g}"
        out.append(
            f"advice on {what} ({a['device']}, {a['status']}): limit {a['limit'] or '?'}, GPU busy {busy} of the "
            f"step ({launch}), interference {a['interference']:.1%} = {a['interference_s']:.3f} s an epoch, pick "
            f"{a['pick'] or '?'}"
        )
        g = None if a["script"] else measured.get((a["device"], a["fraction"]))
        if g is not None:
            out.append(
                f"  measured at {a['fraction']:g}: baseline - gpu_resident = {g['step_gap_s']:.3f} s of step, "
                f"{g['epoch_gap_s']:.3f} s of epoch ({g['epoch_gap_s'] / g['baseline_epoch_s']:.1%}); the "
                f"advice's interference: {verdict(a['interference_s'], g['step_gap_s'])}"
            )
    study = advice[advice["script"] == ""] if not advice.empty else advice
    advised = set(zip(study["device"], study["fraction"])) if not study.empty else set()
    for (device, fraction), g in sorted(measured.items()):
        if (device, fraction) not in advised:
            out.append(
                f"measured at {fraction:g} on {device} (no advice): baseline - gpu_resident = "
                f"{g['step_gap_s']:.3f} s of step, {g['epoch_gap_s']:.3f} s of epoch"
            )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    args = p.parse_args(argv)
    try:
        client = open_store(args.tracking_uri)
        advice = advices(client, args.experiment)
    except ReportInputError as err:
        print(f"gpu_checks.py: {err}", file=sys.stderr)
        return 2
    try:
        measured = gaps(load_runs(client, args.experiment, RunFilter()))
    except ReportInputError:
        measured = {}
    if advice.empty and not measured:
        print("gpu_checks.py: no advice and no fraction with both baseline and gpu_resident runs", file=sys.stderr)
        return 2
    print("\n".join(lines(advice, measured)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
