"""Words and tables: the per-fraction Markdown tables, the verdict sentences, the CSV rows.

Everything here formats what `stats` computed; nothing is estimated here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from wif.report.stats import PAIRED, Comparison, FractionSummary

FEW_REPEATS = 9  # Google Benchmark warns that fewer repeats make significance weak
NO_INTERVAL_MARK = "†"
RAM_COLUMNS = {"rss": "ram_peak_rss_mb", "uss": "ram_peak_uss_mb", "pss": "ram_peak_pss_mb"}
VRAM_COLUMNS = {"allocated": "vram_peak_allocated_mb", "reserved": "vram_peak_reserved_mb",
                "device": "vram_peak_device_mb"}
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


@dataclass
class Section:
    """One testbed (device, GPU, model): its usable runs, per-fraction summaries and plot files."""

    testbed: str
    runs: pd.DataFrame
    summaries: list[FractionSummary]
    images: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdicts:
    """How the verdict judges: the significance level and which memory figures count as 'cheap'."""

    alpha: float
    ram: str  # a key of RAM_COLUMNS
    vram: str  # a key of VRAM_COLUMNS


def _num(value: float, spec: str = ".3g") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _mb(value: float) -> str:
    return _num(value, ",.0f")


def _ratio(estimate: float, low: float, high: float) -> str:
    """'1.85x (1.70-2.01)', or without the interval when there is none."""
    if math.isnan(estimate):
        return "n/a"
    return f"{estimate:.2f}x" if math.isnan(low) else f"{estimate:.2f}x ({low:.2f}-{high:.2f})"


def _test(speedup: float, p: float, alpha: float) -> str:
    if math.isnan(p):
        return "n/a"
    word = ("faster" if speedup > 1 else "slower") if p < alpha else "n.s."
    return f"{word} ({_p(p)})"


def _p(p: float) -> str:
    """'p<0.001' or 'p=0.042'."""
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def method_note(s: FractionSummary) -> str:
    """Which comparison produced the speedups and tests, in one line."""
    family = "p-values Holm-adjusted within the fraction; intervals are not adjusted."
    if s.method == PAIRED:
        return (f"Speedups are geometric means of within-block ratios {s.baseline}/loader over {s.n_blocks} "
                f"complete blocks (t-interval and t-test on log ratios); {family}")
    why = "no wif.block tags or fewer than 2 blocks"
    if s.missing:
        why = "; ".join(f"block {block} lacks {', '.join(names)}" for block, names in sorted(s.missing.items()))
        why += " (resume the sweep to complete them)"
    return ("Speedups are ratios of mean epoch times (delta-method interval on the log ratio), tested with "
            f"Welch's t-test, unpaired because blocks are incomplete: {why}; {family}")


def markdown_table(s: FractionSummary, alpha: float, confidence: float) -> str:
    """One row per loader, fastest first, the figures a reader compares."""
    level = f"{confidence:.0%}"
    bound = "bound_share" in s.table
    header = ["loader", "n", f"epoch time s ({level} CI)", "img/s", f"speedup vs {s.baseline} ({level} CI)",
              f"vs {s.baseline} (Holm)", "data wait", "VRAM alloc / device MB", "RAM RSS / USS / PSS MB",
              "val acc", "test acc"] + (["of bound"] if bound else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for loader, r in s.table.iterrows():
        if r["n"] < 2:
            time = f"{_num(r['epoch_time_mean_s'], '.4g')} {NO_INTERVAL_MARK}"
        else:
            time = f"{r['epoch_time_mean_s']:.4g} ± {_num((r['epoch_time_ci_high_s'] - r['epoch_time_ci_low_s']) / 2)}"
        test = "—" if loader == s.baseline else _test(r["speedup"], r["p_holm"], alpha)
        cells = [str(loader), str(int(r["n"])), time, _num(r["throughput_mean_img_s"], ",.0f"),
                 _ratio(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]), test,
                 _num(r["data_wait_share_mean"], ".1%"),
                 f"{_mb(r['vram_peak_allocated_mb'])} / {_mb(r['vram_peak_device_mb'])}",
                 " / ".join(_mb(r[c]) for c in RAM_COLUMNS.values()),
                 _num(r["val_acc"]), _num(r["test_acc"])] + ([_num(r["bound_share"], ".0%")] if bound else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def footnotes(s: FractionSummary) -> list[str]:
    """Warnings the reader needs to weigh the table: missing intervals, few repeats."""
    notes = [method_note(s)]
    n = s.table["n"]
    if (n < 2).any():
        notes.append(f"{NO_INTERVAL_MARK} fewer than 2 repeats: mean shown without an interval, not tested.")
    if (n < FEW_REPEATS).any():
        notes.append(f"Fewer than {FEW_REPEATS} repeats in {int((n < FEW_REPEATS).sum())} of {len(n)} cells "
                     f"(min {int(n.min())}): significance is weak (Google Benchmark's advice).")
    if "bound_share" in s.table:
        notes.append("'of bound': throughput as a share of the synthetic on-device upper bound "
                     "(same testbed and batch size): near 100% means loading is not the bottleneck.")
    return notes


def verdict(s: FractionSummary, rules: Verdicts) -> str:
    """One sentence: the fastest, by how much against baseline and the runner-up, the cheapest in memory."""
    t = s.table
    fastest = t.index[0]
    row = t.loc[fastest]
    text = f"At fraction {s.fraction:g}, {fastest} is fastest ({row['epoch_time_mean_s']:.4g} s/epoch"
    if fastest == s.baseline:
        text += ", the baseline itself)"
    elif s.baseline in t.index:
        text += f", {_ratio(row['speedup'], row['speedup_ci_low'], row['speedup_ci_high'])} vs {s.baseline})"
    else:
        text += f"; no {s.baseline} runs to compare with)"
    if len(t) == 1:
        return text + "; it is the only setting that ran."
    text += _against_runner_up(t.index[1], s.vs_fastest[t.index[1]], rules.alpha)
    return text + _cheapest(s, rules) + "."


def _against_runner_up(runner: str, c: Comparison, alpha: float) -> str:
    margin = f"{1 / c.speedup.estimate:.2f}x"
    if math.isnan(c.p_value):
        return f"; whether it beats the runner-up {runner} ({margin}) cannot be tested with these repeats"
    if c.p_value < alpha:
        return f"; it is significantly faster than the runner-up {runner} ({margin}, Holm {_p(c.p_value)})"
    return (f"; it is NOT significantly faster than the runner-up {runner} ({margin}, Holm {_p(c.p_value)}), "
            "so treat them as tied")


def _cheapest(s: FractionSummary, rules: Verdicts) -> str:
    fastest = s.table.index[0]
    keep = [fastest] + [n for n, c in s.vs_fastest.items() if not c.p_value < rules.alpha]
    pool = s.table.loc[keep]
    picks = {}
    for label, columns, choice in (("RAM", RAM_COLUMNS, rules.ram), ("VRAM", VRAM_COLUMNS, rules.vram)):
        column = _present(pool, [columns[choice], *columns.values()])
        if column:
            best = pool[column].idxmin()
            picks[label] = (best, f"{_column_label(column)} {_mb(pool.loc[best, column])} MB")
    if not picks:
        return ""
    figures = ", ".join(f"peak {label} {what}" for label, (_, what) in picks.items())
    if len(keep) == 1:
        return f"; every other setting is significantly slower, so it is also the memory pick ({figures})"
    text = f"; among the {len(keep)} settings not significantly slower than {fastest}, the cheapest "
    names = {name for name, _ in picks.values()}
    if len(names) == 1:
        return text + f"in memory is {names.pop()} ({figures})"
    return text + " and ".join(f"in {label} is {name} (peak {what})" for label, (name, what) in picks.items())


def _present(frame: pd.DataFrame, columns: Sequence[str]) -> str | None:
    return next((c for c in columns if c in frame and frame[c].notna().any()), None)


def _column_label(column: str) -> str:
    return column.split("_")[-2].upper() if column.startswith("ram") else column.split("_")[-2]


def csv_rows(s: FractionSummary, runs: pd.DataFrame) -> pd.DataFrame:
    """The fraction's table as CSV rows: one per cell, every number, where it ran and how it was computed."""
    rows = s.table.reset_index()
    first = runs.iloc[0]
    where = {"testbed": first["testbed"], "device": first["device"], "gpu": first["gpu"], "model": first["model"],
             "fraction": s.fraction}
    for i, (column, value) in enumerate(where.items()):
        rows.insert(i, column, value)
    rows.insert(len(where) + 1, "cell", [f"{name}@{s.fraction:g}" for name in rows["loader"]])
    rows.insert(len(where) + 2, "rank", range(1, len(rows) + 1))
    rows["method"] = s.method
    rows["n_blocks"] = s.n_blocks
    return rows


def excluded_table(runs: pd.DataFrame) -> str:
    """Runs left out of every statistic, with why."""
    if runs.empty:
        return "None."
    lines = ["| run | cell | device | status | error or reason |", "|---|---|---|---|---|"]
    for _, r in runs.iterrows():
        lines.append(f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {r['device']} | {r['status']} | "
                     f"{r['excluded'].replace('|', '/')} |")
    return "\n".join(lines)


def device_note(runs: pd.DataFrame) -> str:
    """Which hardware the figures come from, so CPU and GPU numbers are never mistaken for one another."""
    first = runs.iloc[0]
    where = f"**{first['device']}**" + (f" on **{first['gpu']}**" if first["gpu"] not in (None, "none") else "")
    return (f"Figures from {where}, model {first['model']}: {len(runs)} finished runs, "
            f"{runs['cell'].nunique()} cells, {runs['loader'].nunique()} loaders.")


def mixed_settings_note(runs: pd.DataFrame) -> str | None:
    """A warning when runs pooled in one cell may differ in settings that change epoch time."""
    mixed = [f"{param} ({', '.join(sorted(map(str, runs[col].dropna().unique())))})"
             for col, param in MIXED_PARAMS.items() if runs[col].nunique() > 1]
    if not mixed:
        return None
    return f"**Warning:** these runs differ in {'; '.join(mixed)}; narrow them with --sweep-id or --tag."


def render(header: Header, sections: Sequence[Section], excluded: pd.DataFrame, rules: Verdicts,
           confidence: float, images: bool) -> str:
    """The whole report as Markdown; `images=False` gives the same text for a terminal."""
    used = sum(len(s.runs) for s in sections)
    bound = f"{header.bound_runs} as the on-device upper bound, " if header.bound_runs else ""
    out = ["# Who is faster", "",
           f"Experiment `{header.experiment}` at `{header.tracking_uri}`, generated {header.generated}. "
           f"Filter: `` {header.filter} ``. {header.runs_read} training runs read: {used} used, {bound}"
           f"{len(excluded)} excluded (listed at the end)."]
    if len(sections) > 1:
        out.append(f"\nRuns come from {len(sections)} testbeds; they are never pooled: one section each.")
    for section in sections:
        out += ["", f"## {section.testbed}", "", device_note(section.runs)]
        note = mixed_settings_note(section.runs)
        out += ["", note] if note else []
        for s in sorted(section.summaries, key=lambda s: s.fraction):
            out += ["", f"### Fraction {s.fraction:g}", "", f"**Verdict.** {verdict(s, rules)}", "",
                    markdown_table(s, rules.alpha, confidence), ""]
            out += [f"- {note}" for note in footnotes(s)]
        if images:
            out += ["", "### Plots", ""] + [f"![{name}]({name})" for name in section.images]
    out += ["", "## Excluded runs (failed, killed, running or incomplete; in no statistic)", "",
            excluded_table(excluded)]
    return "\n".join(out) + "\n"
