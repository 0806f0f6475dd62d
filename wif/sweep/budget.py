"""What a time budget lets run (`sweep.budget_min`): which job may start, what fits, which fractions race now.

Pure rules on wif.sweep.prices' prices and the seconds left. A fixed job starts only where its *upper* price
fits. An auto job starts where its smallest useful run fits, with a deadline at its upper price or the end.
Cheaper jobs after a refused one still may start. A budgeted job evaluates less: NOTE [ What a budgeted job
evaluates ]. A race under a budget runs the fractions whose first look fits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from wif.sweep import callback
from wif.sweep.prices import END_RESERVE_S, Job, Prices

if TYPE_CHECKING:  # the race's statistics (pandas, scipy) wait for a race to start
    from wif.decide.race import FractionState, RaceRules

log = logging.getLogger("wif")
States = Dict[float, "FractionState"]
EVAL_KEYS = ("data.val_images", "data.test_images")


def may_start(upper_s: float, left_s: float) -> bool:
    """A job may start only if its upper price, and the sweep's end after it, fit in what is left."""
    return upper_s + END_RESERVE_S <= left_s


def fits(jobs: Sequence[Job], prices: Prices, left_s: float) -> Tuple[List[Job], List[Job]]:
    """(the jobs that fit in `left_s` at their expected prices, a prefix of the order; the rest)."""
    spent, out = 0.0, []
    for i, job in enumerate(jobs):
        spent += prices.expected_s(job)
        if spent + END_RESERVE_S > left_s:
            return out, list(jobs[i:])
        out.append(job)
    return out, []


def choose_fractions(first_look_s: Dict[float, float], left_s: float) -> List[float]:
    """The fractions a race runs now: those whose cost to their first look fits, cheapest first, or the cheapest."""
    chosen, spent = [], 0.0
    for fr, cost in sorted(first_look_s.items(), key=lambda i: (i[1], i[0])):
        if spent + cost + END_RESERVE_S <= left_s:
            chosen.append(fr)
            spent += cost
    return sorted(chosen) or ([min(first_look_s, key=lambda fr: (first_look_s[fr], fr))] if first_look_s else [])


def minutes(seconds: float) -> str:
    """'2.5 min'."""
    return f"{seconds / 60:.1f} min"


# NOTE [ What a budgeted job evaluates ]
# A budgeted job is for its training epochs, which the race compares. Its validation each epoch and its test
# pass only check that it trained. `sweep.eval_images` images tell a broken loader from a working one. A
# 3-minute CPU sweep spent about 2 s of each 8-s job testing 10,000 images. So a budgeted sweep sets
# data.val_images and data.test_images where the user left them null. The overrides join the job's command
# line, so its record and its launch line say them.


def eval_overrides(cfg: DictConfig, arguments: Sequence[str]) -> List[str]:
    """The overrides a budgeted sweep adds to every job, the EVAL_KEYS set nowhere else; or None."""
    size = OmegaConf.select(cfg, "sweep.eval_images")
    budgeted = OmegaConf.select(cfg, "sweep.budget_min") is not None or bool(cfg.sweep.get("probe_only"))
    if size is None or not budgeted:
        return []
    given = {a.partition("=")[0].lstrip("+~") for a in arguments}
    return [f"{k}={size}" for k in EVAL_KEYS if k not in given and OmegaConf.select(cfg, k) is None]


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
