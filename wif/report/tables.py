"""The per-fraction tables: each fraction's Markdown table, its footnotes and its CSV rows.

The testbed's `Section` holds them. Everything here formats what `stats` computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from wif.measure import names
from wif.measure.names import Cell
from wif.report.copycost import BYTES as COPY_BYTES
from wif.report.copycost import COLUMN as COPY_AT_BW
from wif.report.stats import FractionSummary
from wif.report.verdicts import RAM_COLUMNS, mb, method_note, num, sensitivity_note, slower_by

NO_INTERVAL_MARK = "†"


@dataclass
class Section:
    """One testbed (device, GPU, model): its usable runs, per-fraction summaries and plot files."""

    testbed: str
    runs: pd.DataFrame
    summaries: list[FractionSummary]
    images: list[str] = field(default_factory=list)


def _ratio(estimate: float, low: float, high: float) -> str:
    """'1.85x (1.70-2.01)', or without the interval when there is none."""
    if math.isnan(estimate):
        return "n/a"
    return f"{estimate:.2f}x" if math.isnan(low) else f"{estimate:.2f}x ({low:.2f}-{high:.2f})"


def _test(speedup: float, p: float, alpha: float) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    word = ("faster" if speedup > 1 else "slower") if p < alpha else "n.s."
    return f"{word} ({_p(p)})"


def _p(p: float) -> str:
    """'p<0.001' or 'p=0.042'."""
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _vs_fastest(r: pd.Series) -> str:
    """The MCB column: may this setting be the fastest, how much slower at least and most; 'slower' only if shown."""
    if not bool(r["possibly_fastest"]):
        if bool(r.get("clearly_slower", r["slower_at_least"] > 1)):
            return f"≥ {slower_by(r['slower_at_least'])} slower" + (", within margin" if bool(r["tied"]) else "")
        return "tied with the fastest" if bool(r["tied"]) else "not shown fastest (nor slower)"
    at_most = r["slower_at_most"]
    if math.isinf(at_most) or at_most <= 1:
        return "may be fastest"
    return f"may be fastest (≤ {slower_by(at_most)} slower{', tied' if bool(r['tied']) else ''})"


def _figured(table: pd.DataFrame, column: str) -> bool:
    """Whether any row has this figure: runs older than it, or on a CPU (the GPU's), have none, and get no column."""
    return column in table and table[column].notna().any()


def markdown_table(s: FractionSummary, alpha: float, confidence: float) -> str:
    """One row per loader, fastest first, the figures a reader compares."""
    level = f"{confidence:.0%}"
    bound = "bound_share" in s.table
    at_bw = COPY_AT_BW in s.table  # only where wif-bandwidth measured this GPU (wif.report.copycost)
    copied = _figured(s.table, COPY_BYTES)
    step = _figured(s.table, "step_vs_bound")
    busy = _figured(s.table, names.GPU_UTIL_MEAN_PCT)
    stat = "median" if s.value == names.EPOCH_TIME_MEDIAN_S else "mean"
    header = [
        "loader",
        "n",
        f"epoch time s ({stat}, ± {level})",
        "img/s",
        f"speedup vs {s.baseline} ({level} sim.)",
        f"vs {s.baseline}",
        "vs fastest (MCB)",
        "noise",
        "data wait",
    ]
    header += (["copied MB/epoch"] if copied else []) + ["VRAM alloc / device MB", "RAM RSS / USS / PSS MB", "test acc"]
    header += ["of bound"] if bound else []
    header += ["step vs bound"] if step else []
    header += ["GPU busy"] if busy else []
    header += ["copy ms/epoch: measured / at bandwidth"] if at_bw else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for loader, r in s.table.iterrows():
        if r["n"] < 2:
            time = f"{num(r['time_s'], '.4g')} {NO_INTERVAL_MARK}"
        else:
            time = f"{r['time_s']:.4g} ± {num((r['time_ci_high_s'] - r['time_ci_low_s']) / 2)}"
        test = "—" if loader == s.baseline else _test(r["speedup"], r["p_adj"], alpha)
        cells = (
            [
                str(loader),
                str(int(r["n"])),
                time,
                num(r[names.THROUGHPUT_MEAN_IMG_S], ",.0f"),
                _ratio(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                test,
                _vs_fastest(r),
                num(r.get("noise", float("nan")), ".1%"),
                num(r[names.DATA_WAIT_SHARE_MEAN], ".1%"),
            ]
            + ([num(r[COPY_BYTES] / 1e6, ".3g")] if copied else [])
            + [
                f"{mb(r[names.VRAM_PEAK_ALLOCATED_MB])} / {mb(r[names.VRAM_PEAK_DEVICE_MB])}",
                " / ".join(mb(r[c]) for c in RAM_COLUMNS.values()),
                num(r[names.TEST_ACC]),
            ]
            + ([num(r["bound_share"], ".0%")] if bound else [])
            + ([num(r["step_vs_bound"], "+.0%")] if step else [])
            + ([num(r[names.GPU_UTIL_MEAN_PCT] / 100, ".0%")] if busy else [])
        )
        cells += [f"{num(1e3 * r[names.COPY_S], '.3g')} / {num(r[COPY_AT_BW], '.3g')}"] if at_bw else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def footnotes(s: FractionSummary, confidence: float) -> list[str]:
    """What the reader needs to weigh the table: the method, missing intervals, outliers."""
    notes = [method_note(s, confidence)]
    if (s.table["n"] < 2).any():
        notes.append(f"{NO_INTERVAL_MARK} fewer than 2 repeats: mean shown without an interval.")
    if "bound_share" in s.table:
        notes.append(
            "'of bound': throughput as a share of the synthetic on-device upper bound "
            "(same testbed and batch size): near 100% means loading is not the bottleneck."
        )
    if _figured(s.table, "step_vs_bound"):
        notes.append(
            "'step vs bound': the step's time an epoch (compute_mean_s) against the upper bound's at this fraction, "
            "less 1: how much longer the step takes beside this loader than on batches already on the device, the "
            "loader's host work slowing it (on a GPU the thread that launches its kernels; on a CPU its cores)."
        )
    if _figured(s.table, names.GPU_UTIL_MEAN_PCT):
        notes.append(
            "'GPU busy': NVML's utilization over the steady epochs (the share of its sample periods in which a "
            "kernel ran); well below 100% with little data wait, the step idles between the kernels the host "
            "launches: it is launch-bound, and loader settings gain at most the bound."
        )
    if _figured(s.table, COPY_BYTES):
        notes.append(
            "'copied MB/epoch': what the transfer moved host-to-device in a training epoch "
            "(copy_bytes_per_epoch; MB = 10^6 bytes): float32 images, uint8 images under transfer.uint8, "
            "encoded bytes under data.decode=device; 0 for data on the device."
        )
    if s.sensitivity is not None:
        notes.append(sensitivity_note(s))
    return notes + s.notes


def csv_rows(s: FractionSummary, runs: pd.DataFrame) -> pd.DataFrame:
    """The fraction's table as CSV rows: one per cell, every number, where it ran and how it was computed."""
    rows = s.table.reset_index()
    first = runs.iloc[0]
    where = {
        "testbed": first["testbed"],
        "device": first["device"],
        "gpu": first["gpu"],
        "model": first["model"],
        "fraction": s.fraction,
    }
    for i, (column, value) in enumerate(where.items()):
        rows.insert(i, column, value)
    rows.insert(len(where) + 1, "cell", [str(Cell.of(name, s.fraction)) for name in rows["loader"]])
    rows.insert(len(where) + 2, "rank", range(1, len(rows) + 1))
    rows["statistic"] = s.value
    rows["blocked"] = s.fit.blocked
    rows["n_blocks"] = s.fit.n_blocks
    rows["residual_df"] = s.fit.df
    rows["pooled_noise_pct"] = 100 * math.expm1(s.fit.sigma) if s.fit.df > 0 else float("nan")
    rows["noise_pct"] = 100 * rows["noise"]
    rows["vs_fastest_by"] = f"race {s.race.race_id}" if s.race is not None else f"MCB {s.confidence:.0%}"
    return rows
