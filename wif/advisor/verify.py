"""Verified, not guessed: the current setting raced against the best predicted candidates.

Each block runs every setting still in the race once, with trainer.epochs=auto, in an order seeded by the block.
The race's own look (`wif.decide.race.look`) drops the settings clearly slower and says when it is settled.
The answer is the report's rule (`wif.decide.decision.decide`), the current setting the baseline. No statistics
are computed here. See NOTE [ When the race stops ].
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pandas as pd

from wif.advisor.candidates import Candidate, raced
from wif.advisor.runner import Measured, Runner
from wif.config import Config
from wif.decide import decision
from wif.decide.race import FractionState, RaceRules, look
from wif.measure import names

VALUE = names.EPOCH_TIME_MEDIAN_S
BASELINE = "current"

# NOTE [ When the race stops ]
# The race stops as soon as its answer cannot change what the user should do. That is: the look settles
# it; the current setting is clearly slower, a pick; or "keep" is settled, `keep_settled`, where no candidate
# can be faster by more than the margin. It also stops before a block that would end after the advice's
# deadline. A contended run, where others took the cores (`Measured.contended`), never informs a look. The
# runner runs it again while there is time, and a block counts only once every setting in it ran undisturbed.


@dataclass
class RaceResult:
    """What the race found: its final state, the decision's table, each setting's runs and its clean blocks."""

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
        """The mean of summary figure `key` over the setting's race runs; NaN where none has it."""
        values = [m.summary.get(key) for m in self.runs.get(name, []) if m.summary.get(key) is not None]
        return sum(values) / len(values) if values else float("nan")

    def speedup(self, name: str) -> Optional[Tuple[float, float, float]]:
        """A candidate's speedup over the current setting: estimate, low, high of its 95% interval; None: not raced."""
        if self.table is None or name not in self.table.index or name == BASELINE:
            return None
        r = self.table.loc[name]
        return (float(r["speedup"]), float(r["speedup_ci_low"]), float(r["speedup_ci_high"]))

    def faster(self) -> List[str]:
        """The candidates the race shows faster than the current setting (95% interval above 1), fastest first."""
        if self.table is None or "speedup_ci_low" not in self.table:
            return []
        t = self.table.drop(index=BASELINE, errors="ignore")
        return list(t[t["speedup_ci_low"].fillna(0) > 1.0].sort_values("time_s").index)


def keep_settled(runs: pd.DataFrame, rules: RaceRules, alive: Sequence[str]) -> str:
    """Why "keep what you have" can no longer change: every candidate's speedup is below 1 + margin; '' while it can."""
    if BASELINE not in set(runs["loader"]) or runs["loader"].nunique() < 2:
        return ""
    table = decision.decide(runs, VALUE, BASELINE, rules.look_confidence, rules.margin)
    high = table.loc[[n for n in alive if n != BASELINE and n in table.index], "speedup_ci_high"]
    if high.empty or high.isna().any() or (high >= 1 + rules.margin).any():
        return ""
    return f"keep: no candidate can be faster than the current setting by more than {rules.margin:.0%}"


@dataclass
class Race:
    """A race under way: its look's state, its rows and runs so far, and its blocks."""

    runner: Runner
    base: Config
    contenders: Sequence[Candidate]
    rules: RaceRules
    max_epochs: int
    say: Callable[[str], None]
    state: FractionState = field(init=False)
    rows: List[dict] = field(default_factory=list)
    runs: Dict[str, List[Measured]] = field(init=False)
    walls: Dict[str, float] = field(default_factory=dict)  # each setting's last run: what the next block costs
    blocks: int = 0  # blocks every setting ran undisturbed
    block: int = 0  # blocks started

    def __post_init__(self) -> None:
        self.state = FractionState(self.fraction, [c.name for c in self.contenders])
        self.runs = {c.name: [] for c in self.contenders}

    @property
    def fraction(self) -> float:
        """The data fraction the race runs at."""
        return float(self.base.data.fraction)

    def alive(self) -> List[Candidate]:
        """The contenders still in the race, in their given order."""
        return [c for c in self.contenders if c.name in self.state.alive]

    def stop_for_time(self) -> bool:
        """Whether the next block would end past the deadline; if so, the race is settled and says so."""
        need = sum(self.walls.get(c.name, math.nan) for c in self.alive())
        if self.block and not need < self.runner.left_s():
            self.state.settled = self.state.settled or f"its time is spent (the next block takes about {need:.0f} s)"
            self.say(
                f"  the race stops after {self.block} block(s): the next would end after the advice's deadline "
                "(--minutes)"
            )
            return True
        return False

    def run_block(self) -> bool:
        """Run every setting still in once, in the block's seeded order; whether all ran undisturbed."""
        order = self.alive()
        random.Random(self.block).shuffle(order)
        clean = True
        for cand in order:
            clean = self._run(cand) and clean
        self.block += 1
        self.blocks += clean
        return clean

    def _run(self, cand: Candidate) -> bool:
        """One race run of `cand`, said; whether it counts: finished, with its figure, undisturbed."""
        conf = raced(self.base, cand, self.max_epochs)
        m = self.runner.run(conf, "race", cand.name, extra={names.TAG_BLOCK: str(self.block)})
        self.walls[cand.name] = m.wall_s
        used = m.ok and bool(m.summary.get(VALUE)) and not m.contended
        if used:
            self.runs[cand.name].append(m)
            self.rows.append(
                {"loader": cand.name, "block": self.block, "fraction": self.fraction, VALUE: m.summary[VALUE]}
            )
        self.say(
            f"  block {self.block + 1} {cand.name:<14} "
            + (
                f"{m.summary[VALUE]:.3f} s/epoch over {int(m.summary.get(names.EPOCHS_RUN, 0))} epochs"
                if m.ok
                else f"{m.status}: {m.error}"
            )
            + (f"; CONTENDED (others used {m.other_pct:.0f}% of a core): left out" if m.ok and m.contended else "")
        )
        return used

    def look(self, clean: bool) -> None:
        """After a clean block, the report's look; from `rules.min_blocks` on, whether "keep" is settled, said."""
        rules = self.rules
        if self.rows and clean:
            self.state = look(self.state, pd.DataFrame(self.rows), VALUE, rules, self.blocks)
            if not self.state.settled and self.blocks >= rules.min_blocks and BASELINE in self.state.alive:
                self.state.settled = keep_settled(pd.DataFrame(self.rows), rules, self.state.alive)
        if clean and self.blocks >= rules.min_blocks:
            dropped = ", ".join(f"{n} (>= {s:.2f}x slower)" for n, s in self.state.dropped.items())
            self.say(
                f"  look after block {self.blocks}: in the race {', '.join(self.state.alive)}"
                + (f"; dropped {dropped}" if dropped else "")
                + (f"; settled: {self.state.settled}" if self.state.settled else "")
            )

    def result(self) -> RaceResult:
        """The race's answer: the decision's table over its clean blocks; None with too few settings."""
        frame = pd.DataFrame(self.rows)
        table = None
        if not frame.empty and frame["loader"].nunique() > 1 and BASELINE in set(frame["loader"]):
            table = decision.decide(frame, VALUE, BASELINE, self.rules.confidence, self.rules.margin)
        return RaceResult(state=self.state, table=table, runs=self.runs, blocks=self.blocks)


def run_race(
    runner: Runner,
    base: Config,
    contenders: Sequence[Candidate],
    *,
    rules: RaceRules,
    max_epochs: int,
    say: Callable[[str], None],
) -> RaceResult:
    """Race `contenders`, the current setting first, in blocks. See NOTE [ When the race stops ].

    It stops once settled, after rules.max_blocks undisturbed blocks, or at the runner's deadline.

    Args:
        runner: what runs each race run.
        base: the configuration.
        contenders: the settings raced, the current one first.
        rules: the race's blocks, confidence and margin.
        max_epochs: each run's trainer.epochs=auto cap.
        say: where its lines go.
    """
    race = Race(runner=runner, base=base, contenders=contenders, rules=rules, max_epochs=max_epochs, say=say)
    while race.blocks < rules.max_blocks and race.block < 2 * rules.max_blocks:
        if race.stop_for_time():
            break
        race.look(race.run_block())
        if race.state.settled:
            break
        if BASELINE in race.state.dropped:  # the question asked is answered: some candidate is clearly faster
            say("  the current setting is clearly slower: the race stops (those left are compared by the model)")
            break
    return race.result()
