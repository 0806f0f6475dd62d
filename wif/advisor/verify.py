"""Verified, not guessed: the current setting raced against the best predicted candidates.

Each block runs every setting still in the race once (trainer.epochs=auto), in an order seeded by the
block; from `rules.min_blocks` on, the race's own look (`wif.report.race.look`) drops the settings
already clearly slower and says when it is settled. The answer is the report's decision rule
(`wif.report.decision.decide`) with the current setting as the baseline: each candidate's speedup and its
95% interval, from the blocks. No statistics are computed here.

The race stops as soon as its answer cannot change what the user should do: the look settles it, the
current setting is clearly slower (pick), or "keep" is settled (`keep_settled`: no candidate can be faster
by more than the margin); and before a block that would end after the advice's deadline. A contended run
(others took the cores, `Measured.contended`) never informs a look: the runner runs it again while there is
time, and a block counts only once every setting in it ran undisturbed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import pandas as pd

from wif.advisor.runner import Candidate, Measured, Runner, raced
from wif.config import Config
from wif.report import decision
from wif.report.race import FractionState, RaceRules, look

VALUE = "epoch_time_median_s"
BASELINE = "current"


@dataclass
class RaceResult:
    state: FractionState
    table: Optional[pd.DataFrame]  # decision.decide's columns, indexed by setting (None: too few runs)
    runs: Dict[str, List[Measured]]  # setting -> its finished race runs
    blocks: int

    def measured_s(self, name: str) -> float:
        """The setting's epoch time as the model estimates it over the blocks (NaN if it has none)."""
        if self.table is not None and name in self.table.index:
            return float(self.table.loc[name, "time_s"])
        return float("nan")

    def mean(self, name: str, key: str) -> float:
        values = [m.summary.get(key) for m in self.runs.get(name, []) if m.summary.get(key) is not None]
        return sum(values) / len(values) if values else float("nan")

    def faster(self) -> List[str]:
        """The candidates the race shows faster than the current setting (95% interval above 1), fastest first."""
        if self.table is None or "speedup_ci_low" not in self.table:
            return []
        t = self.table.drop(index=BASELINE, errors="ignore")
        return list(t[t["speedup_ci_low"].fillna(0) > 1.0].sort_values("time_s").index)


def keep_settled(runs: pd.DataFrame, rules: RaceRules, alive: Sequence[str]) -> str:
    """Why "keep what you have" can no longer change ('' while it can): at the look's confidence, every
    candidate still in the race has a speedup over the current setting below 1 + margin, so more blocks
    cannot show one worth switching to (the report's model, `decision.decide`, with the current setting as its
    baseline)."""
    if BASELINE not in set(runs["loader"]) or runs["loader"].nunique() < 2:
        return ""
    table = decision.decide(runs, VALUE, BASELINE, rules.look_confidence, rules.margin)
    high = table.loc[[n for n in alive if n != BASELINE and n in table.index], "speedup_ci_high"]
    if high.empty or high.isna().any() or (high >= 1 + rules.margin).any():
        return ""
    return f"keep: no candidate can be faster than the current setting by more than {rules.margin:.0%}"


def run_race(
    runner: Runner,
    base: Config,
    contenders: Sequence[Candidate],
    rules: RaceRules,
    max_epochs: int,
    say: Callable[[str], None],
) -> RaceResult:
    """Race `contenders` (the current setting first) in blocks until settled, rules.max_blocks undisturbed
    blocks, or the runner's deadline."""
    fraction = float(base.data.fraction)
    state = FractionState(fraction, [c.name for c in contenders])
    rows: List[dict] = []
    runs: Dict[str, List[Measured]] = {c.name: [] for c in contenders}
    walls: Dict[str, float] = {}  # each setting's last run, start to end: what the next block will cost
    blocks = block = 0  # blocks every setting ran undisturbed; blocks started
    while blocks < rules.max_blocks and block < 2 * rules.max_blocks:
        order = [c for c in contenders if c.name in state.alive]
        need = sum(walls.get(c.name, math.nan) for c in order)
        if block and not need < runner.left_s():
            state.settled = state.settled or f"its time is spent (the next block takes about {need:.0f} s)"
            say(f"  the race stops after {block} block(s): the next would end after the advice's deadline (--minutes)")
            break
        random.Random(block).shuffle(order)
        clean = True
        for cand in order:
            m = runner.run(raced(base, cand, max_epochs), "race", cand.name, {"wif.block": str(block)})
            walls[cand.name] = m.wall_s
            used = m.ok and bool(m.summary.get(VALUE)) and not m.contended
            clean = clean and used
            if used:
                runs[cand.name].append(m)
                rows.append({"loader": cand.name, "block": block, "fraction": fraction, VALUE: m.summary[VALUE]})
            say(
                f"  block {block + 1} {cand.name:<14} "
                + (
                    f"{m.summary[VALUE]:.3f} s/epoch over {int(m.summary.get('epochs_run', 0))} epochs"
                    if m.ok
                    else f"{m.status}: {m.error}"
                )
                + (f"; CONTENDED (others used {m.other_pct:.0f}% of a core): left out" if m.ok and m.contended else "")
            )
        block += 1
        blocks += clean
        if rows and clean:
            state = look(state, pd.DataFrame(rows), VALUE, rules, blocks)
            if not state.settled and blocks >= rules.min_blocks and BASELINE in state.alive:
                state.settled = keep_settled(pd.DataFrame(rows), rules, state.alive)
        if clean and blocks >= rules.min_blocks:
            dropped = ", ".join(f"{n} (>= {s:.2f}x slower)" for n, s in state.dropped.items())
            say(
                f"  look after block {blocks}: in the race {', '.join(state.alive)}"
                + (f"; dropped {dropped}" if dropped else "")
                + (f"; settled: {state.settled}" if state.settled else "")
            )
        if state.settled:
            break
        if BASELINE in state.dropped:  # the question asked is answered: some candidate is clearly faster
            say("  the current setting is clearly slower: the race stops (those left are compared by the model)")
            break
    frame = pd.DataFrame(rows)
    table = None
    if not frame.empty and frame["loader"].nunique() > 1 and BASELINE in set(frame["loader"]):
        table = decision.decide(frame, VALUE, BASELINE, rules.confidence, rules.margin)
    return RaceResult(state, table, runs, blocks)
