"""A race under a time budget (`sweep.budget_min`): which fractions run now, what is left undone, and the
budget's tags on the race's record. The race itself: hydra_plugins/wif_sweeper/race_sweeper.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List

from wif.sweep import callback
from wif.sweep.budget import choose_fractions, minutes

if TYPE_CHECKING:  # the race's statistics (pandas, scipy) wait for a race to start
    from wif.decide.race import FractionState, RaceRules

log = logging.getLogger("wif")
States = Dict[float, "FractionState"]


def plan_fractions(rules: RaceRules, states: States, budget: Any, waiting: List[float]) -> List[float]:
    """The fractions a budgeted race runs now, and its plan said: what they cost to their first look.

    Args:
        rules: the race's rules.
        states: each fraction's state.
        budget: the sweep's budget (wif.sweep.sweep_budget.SweepBudget).
        waiting: the fractions not settled and not run yet.
    """
    first_look = {fr: budget.undone_s(race_jobs(budget, states, fr, rules.min_blocks)) for fr in waiting}
    # Unpriced, the smallest fraction's jobs cost least: they price the rest. See NOTE [ Block 0 prices the rest ]
    focus = choose_fractions(first_look, budget.left_s()) if budget.prices.priced else [min(waiting)]
    now = ", ".join(f"{fr:g}" for fr in focus)
    waits = "; ".join(
        f"{fr:g} waits ({minutes(first_look[fr])} to its first look)" for fr in waiting if fr not in focus
    )
    log.info(
        "Budget plan: fractions %s now (to their first look, after block %d: %s); %s",
        now,
        rules.min_blocks,
        ", ".join(minutes(first_look[fr]) for fr in focus),
        waits or "none waits",
    )
    budget.log_plan(
        [j for fr in focus for j in race_jobs(budget, states, fr, rules.max_blocks)],
        f"the race at {now} (no setting dropped: at most)",
    )
    return focus


def undone_jobs(rules: RaceRules, states: States, budget: Any) -> List[Any]:
    """The jobs a budgeted race left undone: its unsettled fractions', and any the budget refused."""
    undone = [j for fr, st in states.items() if not st.settled for j in race_jobs(budget, states, fr, rules.max_blocks)]
    undone += [j for j in budget.refused if j not in undone]  # in a settled fraction too: its last blocks
    return [j for j in undone if not budget.jobs[j.key].done]


def decided_line(states: States) -> str:
    """Each fraction: decided or not, and its possibly-fastest settings."""
    return "; ".join(
        f"f{fr:g} {f'decided ({st.settled})' if st.settled else 'not decided'}: possibly fastest {', '.join(st.alive)}"
        for fr, st in sorted(states.items())
    )


def race_jobs(budget: Any, states: States, fraction: float, blocks: int) -> List[Any]:
    """The budget's jobs of a fraction's settings still in the race, blocks 0..blocks-1, block-major.

    Args:
        budget: the sweep's budget.
        states: each fraction's state.
        fraction: the fraction.
        blocks: how many blocks, from block 0.
    """
    alive = set(states[fraction].alive)
    return sorted(
        (j for j in budget.jobs.values() if j.fraction == fraction and j.setting in alive and j.block < blocks),
        key=lambda j: j.block,
    )


def budget_tags(budget: Any, undone: List[Any]) -> Dict[str, str]:
    """The budget's outcome on the race's record: what ended it, and what finishing would cost."""
    return {
        "wif.budget.min": f"{budget.budget_s / 60:g}",
        "wif.budget.probe_s": f"{budget.probe_s:.1f}",
        "wif.budget.ended": callback.TALLY.budget,
        "wif.budget.undone_min": f"{budget.undone_s(undone) / 60:.2f}",
        "wif.budget.by_budget": str(bool(budget.refused)).lower(),
    }
