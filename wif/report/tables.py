"""Tables and the whole report: the per-fraction Markdown tables and their footnotes, the CSV rows, the runs
set apart, and the Markdown document that puts them around the verdicts (`verdicts`).

Everything here formats what `stats` computed; nothing is estimated here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from wif.report import model
from wif.report.copycost import BYTES as COPY_BYTES
from wif.report.copycost import COLUMN as COPY_AT_BW
from wif.report.stats import FractionSummary
from wif.report.verdicts import RAM_COLUMNS, Verdicts, mb, method_note, num, sensitivity_note, slower_by, verdict

NO_INTERVAL_MARK = "†"
MIXED_PARAMS = {"batch_size": "data.batch_size", "epochs": "trainer.epochs", "data_source": "data.source"}


@dataclass
class Header:
    """Where the figures were read from, for the top of the report."""

    experiment: str
    tracking_uri: str
    filter: str
    runs_read: int
    bound_runs: int  # synthetic on-device upper-bound runs: a reference, not a setting
    generated: str
    statistic: str  # the run figure compared: epoch_time_median_s or epoch_time_mean_s
    contended_kept: bool
    contended_pct: str  # the threshold the runs were tagged with, as text ('25%', or 'the threshold')


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
    """The MCB column: may this setting be the fastest, and how much slower than the fastest at least/most.
    'slower' only where the lower bound shows it (`wif.report.decide`); a tie is never worded as a loss."""
    if not bool(r["possibly_fastest"]):
        if bool(r.get("clearly_slower", r["slower_at_least"] > 1)):
            return f"≥ {slower_by(r['slower_at_least'])} slower" + (", within margin" if bool(r["tied"]) else "")
        return "tied with the fastest" if bool(r["tied"]) else "not shown fastest (nor slower)"
    at_most = r["slower_at_most"]
    if math.isinf(at_most) or at_most <= 1:
        return "may be fastest"
    return f"may be fastest (≤ {slower_by(at_most)} slower{', tied' if bool(r['tied']) else ''})"


def markdown_table(s: FractionSummary, alpha: float, confidence: float) -> str:
    """One row per loader, fastest first, the figures a reader compares."""
    level = f"{confidence:.0%}"
    bound = "bound_share" in s.table
    at_bw = COPY_AT_BW in s.table  # only where wif-bandwidth measured this GPU (wif.report.copycost)
    copied = COPY_BYTES in s.table and s.table[COPY_BYTES].notna().any()  # runs from before issue 41 have none
    stat = "median" if s.value == "epoch_time_median_s" else "mean"
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
                num(r["throughput_mean_img_s"], ",.0f"),
                _ratio(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                test,
                _vs_fastest(r),
                num(r.get("noise", float("nan")), ".1%"),
                num(r["data_wait_share_mean"], ".1%"),
            ]
            + ([num(r[COPY_BYTES] / 1e6, ".3g")] if copied else [])
            + [
                f"{mb(r['vram_peak_allocated_mb'])} / {mb(r['vram_peak_device_mb'])}",
                " / ".join(mb(r[c]) for c in RAM_COLUMNS.values()),
                num(r["test_acc"]),
            ]
            + ([num(r["bound_share"], ".0%")] if bound else [])
        )
        cells += [f"{num(1e3 * r['copy_s'], '.3g')} / {num(r[COPY_AT_BW], '.3g')}"] if at_bw else []
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
    if COPY_BYTES in s.table and s.table[COPY_BYTES].notna().any():
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
    rows.insert(len(where) + 1, "cell", [f"{name}@{s.fraction:g}" for name in rows["loader"]])
    rows.insert(len(where) + 2, "rank", range(1, len(rows) + 1))
    rows["statistic"] = s.value
    rows["blocked"] = s.fit.blocked
    rows["n_blocks"] = s.fit.n_blocks
    rows["residual_df"] = s.fit.df
    rows["pooled_noise_pct"] = 100 * math.expm1(s.fit.sigma) if s.fit.df > 0 else float("nan")
    rows["noise_pct"] = 100 * rows["noise"]
    rows["vs_fastest_by"] = f"race {s.race.race_id}" if s.race is not None else f"MCB {s.confidence:.0%}"
    return rows


def excluded_table(runs: pd.DataFrame) -> str:
    """Runs left out of every statistic, with why."""
    if runs.empty:
        return "None."
    lines = ["| run | cell | device | status | error or reason |", "|---|---|---|---|---|"]
    for _, r in runs.iterrows():
        lines.append(
            f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {r['device']} | {r['status']} | "
            f"{r['excluded'].replace('|', '/')} |"
        )
    return "\n".join(lines)


def device_note(runs: pd.DataFrame) -> str:
    """Which hardware the figures come from, so CPU and GPU numbers are never mistaken for one another."""
    first = runs.iloc[0]
    where = f"**{first['device']}**" + (f" on **{first['gpu']}**" if first["gpu"] not in (None, "none") else "")
    return (
        f"Figures from {where}, model {first['model']}: {len(runs)} finished runs, "
        f"{runs['cell'].nunique()} cells, {runs['loader'].nunique()} loaders."
    )


def mixed_settings_note(runs: pd.DataFrame) -> str | None:
    """A warning when runs pooled in one cell may differ in settings that change epoch time."""
    mixed = [
        f"{param} ({', '.join(sorted(map(str, runs[col].dropna().unique())))})"
        for col, param in MIXED_PARAMS.items()
        if runs[col].nunique() > 1
    ]
    if not mixed:
        return None
    return f"**Warning:** these runs differ in {'; '.join(mixed)}; narrow them with --sweep-id or --tag."


def contended_table(runs: pd.DataFrame, value: str) -> str:
    """Runs that shared the machine: how much CPU others took, and the figure they would have contributed."""
    if runs.empty:
        return "None."
    lines = ["| run | cell | others' CPU (% of a core) | epoch time s |", "|---|---|---|---|"]
    for _, r in runs.sort_values("host_other_cpu_pct", ascending=False).iterrows():
        lines.append(
            f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {num(r['host_other_cpu_pct'], '.0f')} | "
            f"{num(r[value], '.4g')} |"
        )
    return "\n".join(lines)


def not_cold(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs under data.page_cache=cold whose measured epochs were not cold (tag wif.page_cache_cold=false)."""
    if "page_cache_cold" not in runs:
        return runs.iloc[:0]
    return runs[runs["page_cache_cold"].fillna("").str.lower() == "false"]


def not_cold_note(runs: pd.DataFrame) -> str | None:
    """The warning a testbed's section carries when some of its cold runs read warm pages."""
    bad = not_cold(runs)
    if bad.empty:
        return None
    cells = ", ".join(sorted(bad["cell"].dropna().unique()))
    return (
        f"**Warning: not cold.** {len(bad)} runs under data.page_cache=cold ({cells}) kept their data in the "
        "page cache in measured epochs: their figures are warm ones (tag wif.page_cache_cold=false; listed "
        "under Runs set apart)."
    )


def decode_note(runs: pd.DataFrame) -> str | None:
    """The caveat a testbed's section carries when some of its runs decoded on the device without a GPU."""
    if "decode_note" not in runs or not runs["decode_note"].notna().any():
        return None
    on_cpu = runs[runs["decode_note"].notna()]
    cells = ", ".join(sorted(on_cpu["cell"].dropna().unique()))
    return (
        f"**Note: decoded on the CPU.** {len(on_cpu)} runs under data.decode=device ({cells}) had no GPU: each "
        "batch was decoded on the CPU in the main process, so their figures mean nothing for the speed of "
        "decoding on a GPU (tag wif.decode_note)."
    )


def not_cold_table(sections: Sequence[Section]) -> str:
    lines = ["| run | cell | why |", "|---|---|---|"]
    for section in sections:
        for _, r in not_cold(section.runs).iterrows():
            lines.append(f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {r.get('page_cache_note') or ''} |")
    return "\n".join(lines) if len(lines) > 2 else "None."


def outliers_table(sections: Sequence[Section]) -> str:
    """Runs the model flags as far out, with their robust z-score (kept in the fit; each fraction's note says
    whether leaving them out changes the answer)."""
    lines = ["| run | cell | block | epoch time s | residual (robust SD) |", "|---|---|---|---|---|"]
    for section in sections:
        names = section.runs.set_index("run_id")
        for s in section.summaries:
            if s.sensitivity is None:
                continue
            for _, r in s.sensitivity.left_out.iterrows():
                run = names.loc[r["run_id"]]
                lines.append(
                    f"| {run['run_name']} (`{r['run_id'][:8]}`) | {run['cell']} | {r['block']} | "
                    f"{r[s.value]:.4g} | {r['z']:+.1f} |"
                )
    return "\n".join(lines) if len(lines) > 2 else "None."


def render(
    header: Header,
    sections: Sequence[Section],
    excluded: pd.DataFrame,
    contended: pd.DataFrame,
    rules: Verdicts,
    confidence: float,
    images: bool,
) -> str:
    """The whole report as Markdown; `images=False` gives the same text for a terminal."""
    used = sum(len(s.runs) for s in sections)
    bound = f"{header.bound_runs} as the on-device upper bound, " if header.bound_runs else ""
    apart = "" if header.contended_kept else f"{len(contended)} contended (left out), "
    out = [
        "# Who is faster",
        "",
        f"Experiment `{header.experiment}` at `{header.tracking_uri}`, generated {header.generated}. "
        f"Filter: `` {header.filter} ``. {header.runs_read} training runs read: {used} used, {bound}{apart}"
        f"{len(excluded)} excluded (all listed at the end). Each run's figure: its "
        f"{'median' if header.statistic == 'epoch_time_median_s' else 'mean'} epoch time, warm-up left out.",
    ]
    if len(sections) > 1:
        out.append(f"\nRuns come from {len(sections)} testbeds; they are never pooled: one section each.")
    for section in sections:
        out += ["", f"## {section.testbed}", "", device_note(section.runs)]
        for note in (mixed_settings_note(section.runs), not_cold_note(section.runs), decode_note(section.runs)):
            out += ["", note] if note else []
        for s in sorted(section.summaries, key=lambda s: s.fraction):
            out += [
                "",
                f"### Fraction {s.fraction:g}",
                "",
                f"**Verdict.** {verdict(s, rules)}",
                "",
                markdown_table(s, rules.alpha, confidence),
                "",
            ]
            out += [f"- {note}" for note in footnotes(s, confidence)]
        if images:
            out += ["", "### Plots", ""] + [f"![{name}]({name})" for name in section.images]
    kept = (
        "kept in the fit (--keep-contended)"
        if header.contended_kept
        else "left out of the fit (--keep-contended keeps them)"
    )
    out += [
        "",
        "## Runs set apart",
        "",
        f"### Contended: other processes used more than {header.contended_pct} of a core during the measured "
        f"epochs; {kept}",
        "",
        contended_table(contended, header.statistic),
        "",
        "### Not cold: data.page_cache=cold runs whose measured epochs read warm pages; kept in the fit, "
        "their cells' figures are warm ones",
        "",
        not_cold_table(sections),
        "",
        "### Outliers: residual beyond "
        f"{model.OUTLIER_SDS:g} robust SDs in a robust fit; kept in the fit, each fraction's notes say what "
        "changes without them",
        "",
        outliers_table(sections),
        "",
        "### Excluded: failed, killed, running or incomplete; in no statistic",
        "",
        excluded_table(excluded),
    ]
    return "\n".join(out) + "\n"
