"""The sentences a reader acts on, per fraction: who may be fastest, who is tied, who is clearly slower.

They also name the cheapest in memory of the fastest, how much slower the slower are, and whether outliers
move the answer. Everything here words what `stats` computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from wif.decide import model
from wif.measure import names
from wif.report.stats import FractionSummary, significance

VERDICT_NAMES = 5  # clearly slower settings named in the verdict; the table lists them all
RAM_COLUMNS = {"rss": names.RAM_PEAK_RSS_MB, "uss": names.RAM_PEAK_USS_MB, "pss": names.RAM_PEAK_PSS_MB}
VRAM_COLUMNS = {
    "allocated": names.VRAM_PEAK_ALLOCATED_MB,
    "reserved": names.VRAM_PEAK_RESERVED_MB,
    "device": names.VRAM_PEAK_DEVICE_MB,
}


@dataclass(frozen=True)
class Verdicts:
    """How the verdict judges: the significance level and which memory figures count as 'cheap'."""

    alpha: float
    ram: str  # a key of RAM_COLUMNS
    vram: str  # a key of VRAM_COLUMNS


def num(value: float, spec: str = ".3g") -> str:
    """A figure in a table cell: 'n/a' where a run did not record it (a CPU run has no VRAM)."""
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def mb(value: float) -> str:
    """Megabytes as a reader compares them: whole, with thousands separators."""
    return num(value, ",.0f")


def slower_by(x: float) -> str:
    """How much slower a ratio x >= 1 is: '2.46x' for a clear gap, '0.4%' below 1.1x, where '1.00x' would mislead."""
    return f"{x:.2f}x" if x >= 1.1 else f"{100 * (x - 1):.1f}%"


def method_note(s: FractionSummary, confidence: float) -> str:
    """How the comparisons were made, in words a practitioner can check."""
    f = s.fit
    what = "run medians of epoch time" if s.value == names.EPOCH_TIME_MEDIAN_S else "run means of epoch time"
    design = (
        f"setting + block ({f.n_blocks} blocks)"
        if f.blocked
        else "setting (no usable blocks: "
        + (
            "; ".join(f"block {b} lacks {', '.join(n)}" for b, n in sorted(s.missing.items()))
            or "no wif.block tags or a single block"
        )
        + ")"
    )
    if f.df <= 0:
        return (
            f"One model over {f.n_runs} runs: log({what}) = {design}; no residual degrees of freedom "
            "(one run per setting), so nothing can be tested: run more repeats."
        )
    own = f.noise[~pd.isna(f.noise)]
    spread = f", each setting's own {math.expm1(own.min()):.1%} to {math.expm1(own.max()):.1%}" if own.size else ""
    return (
        f"One model over {f.n_runs} runs: log({what}) = {design}, least squares, {f.df} residual degrees "
        f"of freedom, pooled run-to-run noise {math.expm1(f.sigma):.1%}{spread}; each setting is judged by its "
        f"own noise, never below the pooled ({s.baseline}'s, which every comparison with it shares, read with "
        f"the pooled added: docs/statistics.md). Speedups vs {s.baseline} carry "
        f"simultaneous {confidence:.0%} intervals (Dunnett) and adjusted p-values; 'vs fastest' is "
        + (
            s.race.describe() + "."
            if s.race is not None
            else f"Hsu's multiple comparison with the best at {confidence:.0%}, ties within {s.margin:.0%}."
        )
    )


def sensitivity_note(s: FractionSummary) -> str:
    """Whether the answer moves once the runs flagged as outliers are left out."""
    sens = s.sensitivity
    runs = ", ".join(f"{r['loader']} block {r['block']} ({r['z']:+.1f} SD)" for _, r in sens.left_out.iterrows())
    before = s.possibly_fastest
    fastest = (
        "the same possibly-fastest set"
        if set(sens.possibly_fastest) == set(before) or s.race is not None
        else f"possibly fastest {', '.join(sens.possibly_fastest)} (was {', '.join(before)})"
    )
    now = significance(s.table)
    flips = [
        f"{n} {'becomes' if sens.significant[n] else 'is no longer'} significant"
        for n in sorted(now)
        if n in sens.significant and sens.significant[n] != now[n]
    ]
    change = "; ".join([fastest] + flips) if flips or fastest != "the same possibly-fastest set" else None
    return f"Outliers (residual beyond {model.OUTLIER_SDS:g} robust SDs, kept in the table above): {runs}. " + (
        f"Without them: {change}."
        if change
        else f"Without them the answer is unchanged ({fastest}, same significant differences vs {s.baseline})."
    )


def verdict(s: FractionSummary, rules: Verdicts) -> str:
    """The answer to act on: who may be fastest, who is tied, the cheapest of those, who is clearly slower."""
    t = s.table
    if len(t) == 1:
        return f"At fraction {s.fraction:g}, {t.index[0]} is the only setting that ran."
    if s.fit.df <= 0:
        return (
            f"At fraction {s.fraction:g}, {t.index[0]} has the lowest epoch time, but with one run per setting "
            "nothing can be decided: run more repeats."
        )
    best = s.possibly_fastest
    flag = lambda column: t[column].fillna(False).astype(bool) if column in t else pd.Series(False, t.index)  # noqa: E731
    tied, clearly, undecided = flag("tied"), flag("clearly_slower"), flag("undecided")
    pct = f"{s.margin:.0%}"
    if len(best) == 1:
        how = "by the race's looks" if s.race is not None else f"{s.confidence:.0%} MCB"
        text = f"At fraction {s.fraction:g}, **{best[0]} is the fastest** (no other setting may be, {how})"
    else:
        text = f"At fraction {s.fraction:g}, the fastest is one of **{', '.join(best)}**"
        best_tied = [n for n in best if tied[n]]
        if len(best_tied) == len(best):
            text += f", tied within {pct}"
        elif len(best_tied) > 1:
            text += f"; {', '.join(best_tied)} are tied within {pct}"
    near = [n for n in t.index if tied[n] and n not in best]
    if near:
        text += f"; {', '.join(near)} {'is' if len(near) == 1 else 'are'} within {pct} of the fastest"
    text += _cheapest(t.loc[best + near], rules) + "."
    unshown = [n for n in t.index if n not in best and not tied[n] and not clearly[n]]
    if unshown:
        text += f" Not shown to be fastest, nor slower: {', '.join(unshown)}."
    text += _undecided(t[undecided])
    slower = t[clearly & ~tied].sort_values("slower_at_least", ascending=False)
    if not slower.empty:
        named = [
            f"{n} (at least {slower_by(r['slower_at_least'])} slower)" for n, r in slower.head(VERDICT_NAMES).iterrows()
        ]
        rest = len(slower) - len(named)
        least = slower_by(slower["slower_at_least"].min())
        more = f", and {rest} more, each at least {least} slower" if rest else ""
        text += f" Clearly slower: {', '.join(named)}{more}."
    return text + _against_baseline(s, rules.alpha)


def _undecided(rows: pd.DataFrame) -> str:
    """What the runs cannot yet tell, and what would: the noisiest undecided settings first."""
    if rows.empty:
        return ""
    rows = rows.sort_values("noise", ascending=False)
    said = [f"{n}'s runs vary by {num(r['noise'], '.1%')}" for n, r in rows.head(VERDICT_NAMES).iterrows()]
    more = rows["more_blocks"].max()
    advice = f"; about {int(more)} more blocks would settle it" if not pd.isna(more) else "; more blocks would tell"
    return f" Undecided: {', '.join(said)}{advice}."


def _against_baseline(s: FractionSummary, alpha: float) -> str:
    t = s.table
    if s.baseline not in t.index:
        return f" No {s.baseline} runs to compare with."
    others = t.drop(index=s.baseline)
    sig = others["significant"].fillna(False).astype(bool)
    faster, slower = int((sig & (others["speedup"] > 1)).sum()), int((sig & (others["speedup"] < 1)).sum())
    return (
        f" Against {s.baseline}: {faster} faster, {slower} slower, {len(others) - faster - slower} "
        f"not significantly different (simultaneous, alpha={alpha:g})."
    )


def _cheapest(pool: pd.DataFrame, rules: Verdicts) -> str:
    picks = {}
    for label, columns, choice in (("RAM", RAM_COLUMNS, rules.ram), ("VRAM", VRAM_COLUMNS, rules.vram)):
        column = _present(pool, [columns[choice], *columns.values()])
        if column:
            best = pool[column].idxmin()
            picks[label] = (best, f"{_column_label(column)} {mb(pool.loc[best, column])} MB")
    if not picks or len(pool) < 2:
        return ""
    picked = {name for name, _ in picks.values()}
    if len(picked) == 1:
        figures = ", ".join(f"peak {label} {what}" for label, (_, what) in picks.items())
        return f"; the cheapest in memory among them is **{picked.pop()}** ({figures})"
    return "; the cheapest among them " + " and ".join(
        f"in {label} is **{name}** (peak {what})" for label, (name, what) in picks.items()
    )


def _present(frame: pd.DataFrame, columns: Sequence[str]) -> str | None:
    return next((c for c in columns if c in frame and frame[c].notna().any()), None)


def _column_label(column: str) -> str:
    return column.split("_")[-2].upper() if column.startswith("ram") else column.split("_")[-2]
