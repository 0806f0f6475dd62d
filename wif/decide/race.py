"""Racing, as F-Race and irace do it for configurations: after each block, drop the clearly slower settings.

A setting is clearly slower when its simultaneous lower bound to the fastest is above 1. A tie is never read
as a loss. Pure functions on frames of runs, tested on simulated sweeps; the race sweeper applies them.

Stopping on what each block shows would inflate the error rate. So each look uses Hsu's MCB at confidence
1 - alpha / looks, `looks` the most the race can take. By Bonferroni, the chance that any look drops the
fastest setting, or settles on a wrong one, stays below alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Sequence

if TYPE_CHECKING:  # the statistics (pandas, statsmodels) wait for a look: checking RaceRules needs none
    import pandas as pd


@dataclass(frozen=True)
class RaceRules:
    min_blocks: int = 3
    max_blocks: int = 10
    margin: float = 0.02
    confidence: float = 0.95

    @property
    def looks(self) -> int:
        return self.max_blocks - self.min_blocks + 1

    @property
    def look_confidence(self) -> float:
        return 1.0 - (1.0 - self.confidence) / self.looks

    def problems(self) -> List[str]:
        """What makes these rules unusable, said as the keys a user sets."""
        out = []
        if self.min_blocks < 2:
            out.append(f"race.min_blocks={self.min_blocks}: the model needs at least 2 blocks to estimate noise")
        if self.max_blocks < self.min_blocks:
            out.append(f"race.max_blocks={self.max_blocks} is below race.min_blocks={self.min_blocks}")
        if not 0 <= self.margin < 1:
            out.append(f"race.margin={self.margin}: a share in [0, 1), e.g. 0.02 for 2%")
        if not 0 < self.confidence < 1:
            out.append(f"race.confidence={self.confidence}: must lie strictly between 0 and 1")
        return out


@dataclass
class FractionState:
    """Where one fraction's race stands after a look."""

    fraction: float
    alive: List[str]
    dropped: Dict[str, float] = field(default_factory=dict)  # setting -> at least this many times slower
    settled: str = ""  # why it stopped ('' while racing)


def look(state: FractionState, runs: pd.DataFrame, value: str, rules: RaceRules, blocks_done: int) -> FractionState:
    """One look at a fraction after `blocks_done` blocks: drop the clearly slower, say whether it is settled.

    `runs` holds every usable run so far, dropped settings' too: they still inform the noise.
    """
    if state.settled or blocks_done < rules.min_blocks or runs["loader"].nunique() < 2:
        return state  # nothing to judge yet (every run failed or was contended): race on
    from wif.decide import decision, model  # statsmodels: imported at the first look, not by RaceRules

    best = decision.columns(model.fit(runs, value), "", rules.look_confidence, rules.margin)
    alive = [name for name in state.alive if name not in best.index or not best.loc[name, "clearly_slower"]]
    alive.sort(key=lambda name: best.loc[name, "time_s"] if name in best.index else float("inf"))  # fastest first
    dropped = dict(state.dropped)
    dropped.update({name: float(best.loc[name, "slower_at_least"]) for name in state.alive if name not in alive})
    settled = ""
    if len(alive) == 1 and alive[0] in best.index:
        settled = "one setting is fastest"
    elif alive and all(name in best.index and best.loc[name, "tied"] for name in alive):
        settled = f"the possibly-fastest settings are tied within {rules.margin:.0%}"
    elif blocks_done >= rules.max_blocks:
        settled = f"race.max_blocks={rules.max_blocks} reached"
    return FractionState(state.fraction, alive, dropped, settled)


def replay(
    runs: pd.DataFrame, value: str, rules: RaceRules, settings: Dict[float, Sequence[str]], blocks_done: int
) -> Dict[float, FractionState]:
    """The race's state after `blocks_done` blocks, recomputed from the runs alone, each look on its own blocks."""
    states = {fr: FractionState(fr, list(names)) for fr, names in settings.items()}
    for done in range(rules.min_blocks, blocks_done + 1):
        for fr, state in states.items():
            seen = runs[(runs["fraction"] == fr) & (runs["block"].astype(int) < done)]
            if not seen.empty:
                states[fr] = look(state, seen, value, rules, done)
    return states
