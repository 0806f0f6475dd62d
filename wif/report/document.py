"""The report as one Markdown document: its header, each testbed's section and warnings, the runs set apart.

It lays out what `tables`, `verdicts` and `stats` give; nothing is estimated here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from wif.decide import model
from wif.measure import names
from wif.report.tables import Section, footnotes, markdown_table
from wif.report.verdicts import Verdicts, num, verdict

COSTS = (names.JOB_OVERHEAD_S, names.TIME_TOTAL_S, names.VAL_TIME_TOTAL_S, names.TEST_TIME_S)
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


def cost_note(runs: pd.DataFrame) -> str | None:
    """What a run cost, median per run: its job's overhead (`job_overhead_s`), its epochs, validation and test."""
    if names.JOB_OVERHEAD_S not in runs or not runs[names.JOB_OVERHEAD_S].notna().any():
        return None
    had = runs[runs[names.JOB_OVERHEAD_S].notna()]
    fig = {k: pd.to_numeric(had.get(k, pd.Series(index=had.index, dtype=float)), errors="coerce") for k in COSTS}
    overhead, total = fig[names.JOB_OVERHEAD_S].median(), fig[names.TIME_TOTAL_S].median()
    parts = f"{total:.2f} s of epochs, validation and test"
    if fig[names.VAL_TIME_TOTAL_S].notna().all() and fig[names.TEST_TIME_S].notna().all():
        val, test = fig[names.VAL_TIME_TOTAL_S], fig[names.TEST_TIME_S]
        epochs = (fig[names.TIME_TOTAL_S] - val - test).median()
        parts = f"{epochs:.2f} s of epochs, {val.median():.2f} s of validation, {test.median():.2f} s of test"
    return (
        f"A run's cost, median of {len(had)}: {overhead:.2f} s of job overhead (job_overhead_s: its process, data "
        f"and set-up), {parts}."
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
    for _, r in runs.sort_values(names.HOST_OTHER_CPU_PCT, ascending=False).iterrows():
        lines.append(
            f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {num(r[names.HOST_OTHER_CPU_PCT], '.0f')} | "
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
    """Runs under data.page_cache=cold that read warm pages, with why."""
    lines = ["| run | cell | why |", "|---|---|---|"]
    for section in sections:
        for _, r in not_cold(section.runs).iterrows():
            lines.append(f"| {r['run_name']} (`{r['run_id'][:8]}`) | {r['cell']} | {r.get('page_cache_note') or ''} |")
    return "\n".join(lines) if len(lines) > 2 else "None."


def outliers_table(sections: Sequence[Section]) -> str:
    """Runs the model flags as far out, with their robust z-score; they stay in the fit."""
    lines = ["| run | cell | block | epoch time s | residual (robust SD) |", "|---|---|---|---|---|"]
    for section in sections:
        by_id = section.runs.set_index("run_id")
        for s in section.summaries:
            if s.sensitivity is None:
                continue
            for _, r in s.sensitivity.left_out.iterrows():
                run = by_id.loc[r["run_id"]]
                lines.append(
                    f"| {run['run_name']} (`{r['run_id'][:8]}`) | {run['cell']} | {r['block']} | "
                    f"{r[s.value]:.4g} | {r['z']:+.1f} |"
                )
    return "\n".join(lines) if len(lines) > 2 else "None."


@dataclass(frozen=True)
class Document:
    """Everything the report's page says: where from, each testbed's section and the runs set apart."""

    header: Header
    sections: Sequence[Section]
    excluded: pd.DataFrame  # runs in no statistic, with why (column `excluded`)
    contended: pd.DataFrame  # runs that shared the machine
    rules: Verdicts
    confidence: float


def render(doc: Document, images: bool) -> str:
    """The whole report as Markdown; `images=False` gives the same text for a terminal."""
    out = _top(doc)
    for section in doc.sections:
        out += _section(doc, section, images)
    out += _set_apart(doc)
    return "\n".join(out) + "\n"


def _top(doc: Document) -> list[str]:
    """The title, where the figures come from, and how many runs were read, used and set apart."""
    header = doc.header
    used = sum(len(s.runs) for s in doc.sections)
    bound = f"{header.bound_runs} as the on-device upper bound, " if header.bound_runs else ""
    apart = "" if header.contended_kept else f"{len(doc.contended)} contended (left out), "
    out = [
        "# Who is faster",
        "",
        f"Experiment `{header.experiment}` at `{header.tracking_uri}`, generated {header.generated}. "
        f"Filter: `` {header.filter} ``. {header.runs_read} training runs read: {used} used, {bound}{apart}"
        f"{len(doc.excluded)} excluded (all listed at the end). Each run's figure: its "
        f"{'median' if header.statistic == names.EPOCH_TIME_MEDIAN_S else 'mean'} epoch time, warm-up left out.",
    ]
    if len(doc.sections) > 1:
        out.append(f"\nRuns come from {len(doc.sections)} testbeds; they are never pooled: one section each.")
    return out


def _section(doc: Document, section: Section, images: bool) -> list[str]:
    """One testbed: where it ran, its warnings, each fraction's verdict, table and notes, and its plots."""
    out = ["", f"## {section.testbed}", "", device_note(section.runs)]
    notes = (cost_note(section.runs), mixed_settings_note(section.runs), not_cold_note(section.runs))
    for note in (*notes, decode_note(section.runs)):
        out += ["", note] if note else []
    for s in sorted(section.summaries, key=lambda s: s.fraction):
        out += [
            "",
            f"### Fraction {s.fraction:g}",
            "",
            f"**Verdict.** {verdict(s, doc.rules)}",
            "",
            markdown_table(s, doc.rules.alpha, doc.confidence),
            "",
        ]
        out += [f"- {note}" for note in footnotes(s, doc.confidence)]
    if images:
        out += ["", "### Plots", ""] + [f"![{name}]({name})" for name in section.images]
    return out


def _set_apart(doc: Document) -> list[str]:
    """The runs set apart, each kind under its own heading: contended, not cold, outliers, excluded."""
    header = doc.header
    kept = (
        "kept in the fit (--keep-contended)"
        if header.contended_kept
        else "left out of the fit (--keep-contended keeps them)"
    )
    return [
        "",
        "## Runs set apart",
        "",
        f"### Contended: other processes used more than {header.contended_pct} of each core the run left "
        f"idle (at least one) during the measured epochs; {kept}",
        "",
        contended_table(doc.contended, header.statistic),
        "",
        "### Not cold: data.page_cache=cold runs whose measured epochs read warm pages; kept in the fit, "
        "their cells' figures are warm ones",
        "",
        not_cold_table(doc.sections),
        "",
        "### Outliers: residual beyond "
        f"{model.OUTLIER_SDS:g} robust SDs in a robust fit; kept in the fit, each fraction's notes say what "
        "changes without them",
        "",
        outliers_table(doc.sections),
        "",
        "### Excluded: failed, killed, running or incomplete; in no statistic",
        "",
        excluded_table(doc.excluded),
    ]
