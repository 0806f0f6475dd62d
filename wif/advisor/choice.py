"""The advice's last steps: the candidates predicted, the best raced against the current setting, the answer.

Each step takes what the one before returned: `Trials` and `Found` (wif.advisor.trials), then `Predicted`,
then `Raced`, and gives back the `Advice`. The answer's picture shows each epoch's split beside the bound.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from wif.advisor import answer
from wif.advisor.advice import MIN_RACE_EPOCHS, PROG, Advice, race_epochs
from wif.advisor.answer import PHASES, Bound
from wif.advisor.limit import or_zero
from wif.advisor.predict import CLOSE, Prediction, close_call, distinct, rank
from wif.advisor.runner import Measured
from wif.advisor.trials import Found, Trials
from wif.advisor.verify import BASELINE, RaceResult, run_race
from wif.decide.race import RaceRules
from wif.measure import names


@dataclass(frozen=True)
class Predicted:
    """Each setting's predicted epoch, the table's order, and the candidates to race."""

    predictions: Dict[str, Prediction]
    current_s: float  # the configured setting as predicted; where its trial never ran, as measured
    order: List[str]  # the table's rows: the current setting, then the others fastest first
    raced: List[str]  # the candidates to race, fastest first
    close: Optional[str]  # a candidate predicted too close to the current setting to say "keep" unraced
    searched: bool  # whether step 2 searched the loader's settings


@dataclass(frozen=True)
class Raced:
    """The race, where it ran, with the candidates it raced; or why none was verified."""

    race: Optional[RaceResult]
    raced: List[str]
    unverified: str  # why a candidate predicted faster was not verified; '' where none was left so


def predict_candidates(trials: Trials, found: Found) -> Predicted:
    """Step 2's answer: every candidate's epoch predicted, said as the table, and the ones worth racing."""
    ctx = trials.ctx
    opts, zero_workers = ctx.opts, trials.measured.current.workers == 0
    predictions = trials.predictions()
    current_s = predictions["current"].epoch_s if "current" in predictions else trials.measured.current_run.median()
    # the candidates: every setting predicted but the configured one; w0 is it where it has 0 workers
    others = {n: p.epoch_s for n, p in predictions.items() if n not in ("current", "w0" if zero_workers else "")}
    ranked = rank(list(others.items()), current_s, opts.margin)
    raced = distinct(ranked, predictions, opts.race_candidates, opts.margin) if found.searched else []
    close = close_call(others, current_s) if found.searched and not raced else None
    order = ["current"] + sorted(others, key=others.get)
    ctx.say(answer.candidate_table(order, trials.table_ceilings, predictions, race=None))
    if not ctx.cuda:
        ctx.say(answer.shared_cores(predictions, ctx.cores, trials.measured.step.cores))
    return Predicted(
        predictions=predictions,
        current_s=current_s,
        order=order,
        raced=[close] if close else raced,  # "keep" from a prediction this close is verified by the race instead
        close=close,
        searched=found.searched,
    )


def race_candidates(trials: Trials, predicted: Predicted) -> Raced:
    """Step 3: the current setting raced against the candidates to race, where the time left allows."""
    ctx = trials.ctx
    raced, close = predicted.raced, predicted.close
    epochs = _race_epochs(trials, predicted, raced)
    if epochs < MIN_RACE_EPOCHS and len(raced) > 1:  # the fastest alone, where the minutes hold no more
        fewer = _race_epochs(trials, predicted, raced[:1])
        if fewer >= MIN_RACE_EPOCHS:
            ctx.say(f"  the race takes {raced[0]} alone: {', '.join(raced[1:])} too would not fit in the time left")
            raced, epochs = raced[:1], fewer
    if close and epochs < MIN_RACE_EPOCHS:  # no time to verify a close call: the prediction's "keep" stands
        raced = []
    if raced and epochs >= MIN_RACE_EPOCHS:
        return Raced(race=_run_the_race(trials, raced, close, epochs), raced=raced, unverified="")
    if raced:
        unverified = _no_time(trials, predicted, raced)
    elif trials.unreached:  # no figure for them: see wif.watcher.proof
        unverified = f"{next(iter(trials.unreached.values()))}; {', '.join(trials.unreached)} not measured."
    elif trials.cut:
        unverified = (
            f"--minutes {ctx.opts.minutes:g} ran out while the candidates were tried "
            f"({', '.join(trials.cut)} not measured): give it more --minutes."
        )
    else:
        why = (
            f"no candidate is predicted faster than the current setting by more than {ctx.opts.margin:.0%}"
            if predicted.searched
            else "not data-bound"
        )
        ctx.say(f"{PROG}: 3/4 the race: nothing to race ({why})")
        return Raced(race=None, raced=[], unverified="")
    ctx.say(f"{PROG}: 3/4 the race: not run: {unverified}")
    return Raced(race=None, raced=[], unverified=unverified)


def _race_epochs(trials: Trials, predicted: Predicted, raced: List[str]) -> int:
    """Epochs a race run of the current setting against `raced` takes within the time left."""
    ctx = trials.ctx
    return race_epochs(
        ctx.runner.left_s(),
        trials.measured.current_run,
        predicted_s=[predicted.predictions[n].epoch_s for n in raced],
        opts=ctx.opts,
        warmup=ctx.base.trainer.warmup_epochs,
    )


def _run_the_race(trials: Trials, raced: List[str], close: Optional[str], epochs: int) -> RaceResult:
    """The race of the current setting against `raced`, said as it starts."""
    ctx, opts = trials.ctx, trials.ctx.opts
    ctx.say(
        f"{PROG}: 3/4 the race: current against {', '.join(raced)} (trainer.epochs=auto up to {epochs}, "
        f"blocks {opts.min_blocks}..{opts.max_blocks}, {ctx.runner.left_s():.0f} s left)"
        + (
            f"; a close call: {close} is predicted within {CLOSE:.0%} of the current setting, more closely "
            "than the prediction can tell on this machine"
            if close
            else ""
        )
    )
    contenders = [trials.measured.current] + [trials.made[n] for n in raced]
    rules = RaceRules(opts.min_blocks, opts.max_blocks, opts.margin)
    return run_race(ctx.runner, ctx.base, contenders, rules=rules, max_epochs=epochs, say=ctx.say)


def _no_time(trials: Trials, predicted: Predicted, raced: List[str]) -> str:
    """Why the best candidate is not verified: no time was left for the race."""
    ctx, opts = trials.ctx, trials.ctx.opts
    return (
        f"the race had no time left within --minutes {opts.minutes:g} ({opts.min_blocks} blocks of "
        f"{len(raced) + 1} runs need more than the {max(ctx.runner.left_s(), 0):.0f} s left), so "
        f"{raced[0]}, predicted {predicted.current_s / predicted.predictions[raced[0]].epoch_s:.2f}x faster, is not "
        "verified: give it more --minutes."
    )


def give_answer(trials: Trials, found: Found, predicted: Predicted, raced: Raced) -> Advice:
    """Step 4: the pick, the fastest the race shows faster, with its lines; or why to keep the current setting."""
    ctx, race = trials.ctx, raced.race
    faster = race.faster() if race is not None else []
    pick = faster[0] if faster else None
    chosen = trials.made[pick] if pick is not None else None
    pin = ctx.base.loader.pin_memory
    pasted, run_line = ctx.mode.lines(ctx.overrides, chosen, pin) if chosen else (None, None)
    speedup, outside = _speedup(race, pick, ctx.mode.evaluates_alike) if chosen else (None, "")
    return Advice(
        data_bound=found.data_bound,
        sentence=found.sentence,
        pick=pick,
        speedup=speedup,
        outside=outside,
        train_line=run_line,
        dataloader=pasted,
        why=answer.memory_cost(race, pick) if chosen else _why_keep(trials, found, predicted, raced),
        table=answer.candidate_table(predicted.order, trials.table_ceilings, predicted.predictions, race=race),
        parent_run_id=ctx.runner.parent_id,
        runs=0,
        seconds=0.0,
        picture=_picture(trials, raced),
        predicted={n: p.epoch_s for n, p in predicted.predictions.items()},
        measured={n: race.measured_s(n) for n in ["current"] + raced.raced} if race else {},
        limit=found.limit,
        assumes=ctx.runner.assumes,
    )


OUTSIDE_SAID = 0.01  # the script's time outside its training loader is counted past this share of an epoch


def _speedup(race: RaceResult, pick: str, alike: bool) -> Tuple[tuple, str]:
    """The pick's speedup over the script's whole epoch (estimate, low, high) and the line that says what was added.

    `alike`: the script's evaluation takes the pick's settings too. See NOTE [ The time outside the training loader ].
    """
    loader = race.speedup(pick)
    outside, current_s = answer.outside_share(race.runs.get(BASELINE, [])), race.measured_s(BASELINE)
    if math.isnan(current_s) or outside <= OUTSIDE_SAID * current_s:  # a loop's own few ms change nothing
        return loader, ""
    whole = answer.whole_epoch(loader, current_s, outside)
    said = f"Counted: your script's {outside:.3f} s outside its training loader a window (evaluation, saving)"
    if alike:  # between its evaluation unchanged and as much faster as the training loader
        said += (
            f", which takes these settings too: the figure lies between that time unchanged ({whole[0]:.2f}x) "
            f"and as much faster ({loader[0]:.2f}x)."
        )
        return (math.sqrt(whole[0] * loader[0]), whole[1], loader[2]), said
    said += f", which no loader setting shortens; the training loader's epochs alone: {loader[0]:.2f}x "
    return whole, said + f"({loader[1]:.2f}-{loader[2]:.2f})."


def _why_keep(trials: Trials, found: Found, predicted: Predicted, raced: Raced) -> str:
    """Why to keep the current setting: the race had no time, or what was measured or predicted."""
    return raced.unverified or answer.why_keep(
        raced.race,
        raced.raced,
        predicted.predictions,
        data_bound=found.searched,
        on_cpu=not trials.ctx.cuda,
        margin=trials.ctx.opts.margin,
    )


def _picture(trials: Trials, raced: Raced) -> Optional[str]:
    """The picture's path: the configured run, each raced setting's first race run, and the bound's run."""
    measured, race = trials.measured, raced.race
    first_runs = [m for n in ["current"] + raced.raced for m in race.runs.get(n, [])[:1]] if race else []
    bound_run = [measured.bound_run] if measured.bound_run is not None else []
    path = Path(tempfile.mkdtemp(prefix="wif-advise-")) / "epoch_split.png"
    pic = picture([measured.current_run] + first_runs + bound_run, measured.bound, path)
    return str(pic) if pic else None


def picture(runs: Sequence[Measured], bound: Bound, path: Path) -> Optional[Path]:
    """Each setting's steady epoch as stacked phases, beside the bound: a PNG at `path`; None: no run finished."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: List[str] = []
    ok = [m for m in runs if m.ok]
    phases = [(key, label) for key, label in PHASES if any(not math.isnan(m.mean(key)) for m in ok)]  # CUDA's alone
    parts: Dict[str, List[float]] = {label: [] for _, label in phases}
    parts["other"] = []
    for m in ok:
        bars.append(f"{m.name} ({m.role})")
        total, shown = m.mean(names.EPOCH_TIME_S), 0.0
        for key, label in phases:
            v = or_zero(m.mean(key))
            parts[label].append(v)
            shown += v
        parts["other"].append(max(total - shown, 0.0))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 0.5 * len(bars) + 1.5))
    left = [0.0] * len(bars)
    for label, values in parts.items():
        ax.barh(bars, values, left=left, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.axvline(bound.epoch_s, color="black", linestyle="--", label=f"bound ({bound.source})")
    ax.set_xlabel("seconds per epoch (steady epochs' mean)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars, never over them
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
