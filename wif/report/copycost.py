"""What copying a setting's batches costs at the link's measured rate, beside what the runs measured.

A run logs its `copy_bytes_per_epoch`, and `wif-bandwidth` the best host-to-device rate on its GPU. Their
ratio is the least time the epoch's copies can take: the physical anchor for `copy_s`. Pure functions on
frames, and the one read of the bandwidth runs.
"""

from __future__ import annotations

import math

import pandas as pd
from mlflow.tracking import MlflowClient

from wif.measure import names

COLUMN = "copy_ms_per_epoch_at_bw"
BYTES = names.COPY_BYTES_PER_EPOCH
RATE = {True: "h2d_pinned_best_gbps", False: "h2d_pageable_best_gbps"}  # by pin_memory; decimal GB/s
GB = 1e9
BANDWIDTH_COLUMNS = ["bw_run_id", "start_time", "gpu", "gpu_uuid", *RATE.values()]


def read_bandwidth(client: MlflowClient, experiment_id: str) -> pd.DataFrame:
    """The experiment's finished `wif.kind=bandwidth` runs: their GPU (name, uuid) and best h2d rates."""
    found = client.search_runs(
        [experiment_id], f"tags.`{names.TAG_KIND}` = 'bandwidth' and attributes.status = 'FINISHED'"
    )
    rows = [
        {
            "bw_run_id": r.info.run_id,
            "start_time": r.info.start_time,
            "gpu": r.data.tags.get(names.TAG_GPU),
            "gpu_uuid": r.data.tags.get(names.TAG_GPU_UUID),
            **{m: r.data.metrics.get(m) for m in RATE.values()},
        }
        for r in found
    ]
    return pd.DataFrame(rows, columns=BANDWIDTH_COLUMNS)


def _pinned(value: object) -> bool:
    """Whether loader.pin_memory was on."""
    return str(value).lower() == "true"  # the param loader.pin_memory, as MLflow stores it: 'True' / 'False'


def match(run: pd.Series, bandwidth: pd.DataFrame) -> pd.Series | None:
    """The bandwidth run of this run's GPU, by `wif.gpu_uuid`, else by `wif.gpu` name, newest first; or None."""
    newest = bandwidth.sort_values("start_time", ascending=False)
    for key in ("gpu_uuid", "gpu"):
        value = run.get(key)
        if isinstance(value, str) and value not in ("", "none"):
            same = newest[newest[key] == value]
            if not same.empty:
                return same.iloc[0]
    return None


def copy_ms_at_bandwidth(runs: pd.DataFrame, bandwidth: pd.DataFrame) -> pd.Series:
    """Per run: its `copy_bytes_per_epoch` over its GPU's best h2d rate (pinned or pageable) in ms; NaN without one."""
    out = pd.Series(math.nan, index=runs.index, name=COLUMN, dtype=float)
    for i, run in runs.iterrows():
        found = match(run, bandwidth)
        nbytes = run.get(BYTES)
        if found is None or nbytes is None or pd.isna(nbytes):
            continue
        rate = found[RATE[_pinned(run.get("pin_memory"))]]
        if rate is not None and not pd.isna(rate) and rate > 0:
            out[i] = 1e3 * float(nbytes) / (float(rate) * GB)
    return out


def add_copy_cost(runs: pd.DataFrame, bandwidth: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the column `copy_ms_per_epoch_at_bw` where a bandwidth run matches one of them, else as is."""
    if bandwidth.empty or BYTES not in runs:
        return runs
    cost = copy_ms_at_bandwidth(runs, bandwidth)
    return runs.assign(**{COLUMN: cost}) if cost.notna().any() else runs


def note(runs: pd.DataFrame, bandwidth: pd.DataFrame) -> str:
    """The footnote of a table with the column: which rates it divides by, and how to read it beside copy_s."""
    used = {m["bw_run_id"]: m for m in (match(r, bandwidth) for _, r in runs.iterrows()) if m is not None}
    rates = "; ".join(
        f"`{k[:8]}` on {m['gpu']}: pinned {m[RATE[True]]:.1f}, pageable {m[RATE[False]]:.1f} GB/s"
        for k, m in used.items()
    )
    return (
        "'copy ms/epoch': measured is the host's time in the transfer call, its wait behind the GPU's queued "
        "work left out (copy_s, the last epoch's; a non_blocking copy from pinned memory returns at once, so it "
        "can be near 0); at bandwidth is the epoch's "
        "bytes (copy_bytes_per_epoch) over the best host-to-device rate wif-bandwidth measured on this GPU, "
        "pinned for pin_memory settings and pageable otherwise: the least time the copies themselves take "
        f"(bandwidth run {rates}; GB = 10^9 bytes)."
    )
