"""What `wif-advise` says: where the time goes, the candidates' epochs, the pick or why to keep, the lines.

The candidates' epochs are predicted, and measured where raced. The mode gives the lines to paste
(wif.advisor.mode); `wif.advisor.choice` draws the picture.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, NamedTuple, Optional, Sequence

from wif.advisor.limit import Figures, Limit, name_limit, or_zero
from wif.advisor.predict import Prediction, relative_error
from wif.advisor.runner import Measured
from wif.advisor.verify import BASELINE, RaceResult
from wif.measure import names

STRETCH = 0.1  # a step's compute predicted or measured longer than this share beside workers: they share its cores
# gpu_blocked_s, CUDA only: a blocking copy's wait behind the GPU's queued work, kept out of data wait and copy
PHASES = (
    (names.DATA_WAIT_S, "data wait"),
    (names.COPY_S, "copy"),
    (names.GPU_BLOCKED_S, "GPU blocked"),
    (names.COMPUTE_S, "compute"),
    (names.GPU_IDLE_S, "GPU idle"),
)


class Bound(NamedTuple):
    """What an epoch of `items` images can attain with no wait for data, and what measured it."""

    epoch_s: float
    source: str  # the bound's run, or the configured run's own step time
    items: int
    compute_s: float = math.nan  # the bound run's step over the epoch; NaN: no bound run measured
    data_wait_s: float = 0.0  # the bound run's own wait over the epoch: the least any loader costs (0: none)

    @property
    def img_s(self) -> float:
        """The model's rate at the bound: images a second; NaN without a bound."""
        return self.items / self.epoch_s if self.epoch_s > 0 else math.nan


class Verdict(NamedTuple):
    """Where the time goes: whether the wait is worth a search, the sentence that says so, and the limit."""

    data_bound: bool
    sentence: str
    limit: Limit


def where_time_goes(
    now: Measured, bound: Bound, loader_img_s: float, margin: float, workers: int = 0, on_gpu: bool = False
) -> Verdict:
    """The configured epoch against the bound and the loader's ceiling.

    "Data-bound" is said only where the loader is slower than the model. Where it is faster but loads between
    steps, at 0 `workers`, its wait is exposed, not a limit: workers would overlap it.

    Args:
        now: the configured setting's run.
        bound: what an epoch can attain.
        loader_img_s: the loader's ceiling, from its loader-only trial; NaN: not measured.
        margin: within this share of the bound, not data-bound.
        workers: the configured setting's workers.
        on_gpu: whether the step runs on a GPU.
    """
    busy = now.mean(names.GPU_UTIL_PCT) / 100.0
    figures = Figures(
        epoch_s=now.median(),
        data_wait_s=now.mean(names.DATA_WAIT_S),
        copy_s=or_zero(now.mean(names.COPY_S)),
        compute_s=now.mean(names.COMPUTE_S),
        bound_compute_s=bound.compute_s,
        bound_data_wait_s=bound.data_wait_s,
        gpu_blocked_s=or_zero(now.mean(names.GPU_BLOCKED_S)),
        busy=None if math.isnan(busy) else busy,
        on_gpu=on_gpu,
        exposed=loader_img_s > bound.img_s,  # the loader is faster than the model: its wait is said as the wait
    )
    held = name_limit(figures, margin)
    data_bound, sentence = _sentence(now, bound, loader_img_s=loader_img_s, margin=margin, workers=workers, held=held)
    return Verdict(data_bound=data_bound, sentence=sentence, limit=held)


def _sentence(
    now: Measured, bound: Bound, loader_img_s: float, margin: float, workers: int, held: Limit
) -> tuple[bool, str]:
    """(whether the wait is worth a search, the sentence): `where_time_goes`' words."""
    epoch = now.median()
    gap = epoch / bound.epoch_s - 1 if bound.epoch_s > 0 else math.nan
    split = ", ".join(f"{label} {now.mean(key):.3f} s" for key, label in PHASES if not math.isnan(now.mean(key)))
    head = (
        f"The configured setting: {epoch:.3f} s an epoch ({split}); the bound ({bound.source}): {bound.epoch_s:.3f} s."
    )
    wait = (now.mean(names.DATA_WAIT_S) + or_zero(now.mean(names.GPU_IDLE_S))) / epoch
    what = f"\nWhat holds the epoch: {held.said}."
    if gap <= margin:
        return (
            False,
            f"{head}\nNot data-bound: within {max(gap, 0):.0%} of the bound; loader settings cannot help.{what}",
        )
    if wait <= margin:  # slower than the bound, but not waiting: the step itself was slower
        cause = (
            "beside the loader (its host work), which workers or preloading can move off the step"
            if held.kind == "interference"
            else "itself (e.g. a busy CPU), which loader settings cannot help"
        )
        return False, (
            f"{head}\nNot data-bound: the step waits {wait:.0%} of the epoch for data; the epoch is "
            f"{gap:.0%} above the bound in the step {cause}.{what}"
        )
    rates = f"the loader gives {loader_img_s:,.0f} img/s, the model takes {bound.img_s:,.0f}"
    waited = f"epochs are {gap:.0%} slower than the bound (data wait {now.mean(names.DATA_WAIT_S) / epoch:.0%})"
    if math.isnan(loader_img_s):  # its trial never ran, --minutes ran out: which of the two is not known
        return True, (
            f"{head}\nWaiting for data: {waited}; the loader's own rate was not measured (its trial did not run), "
            f"so whether it limits the epoch or only loads between steps is not known.{what}"
        )
    if loader_img_s > bound.img_s:  # the loader keeps up: its time shows only because it is not overlapped
        how = "at 0 workers each batch is loaded between two steps" if workers == 0 else "the prefetch runs dry"
        return True, (
            f"{head}\nThe loader's time is exposed, not a limit: {rates}, but {how}, so {waited}; "
            f"workers overlap the loading with the step.{what}"
        )
    return True, f"{head}\nData-bound: {rates}; {waited}.{what}"


def candidate_table(
    settings: Sequence[str], ceilings: Dict[str, float], predicted: Dict[str, Prediction], race: Optional[RaceResult]
) -> str:
    """One row a candidate: loader-only ceiling, predicted epoch, and for raced ones measured and error.

    Args:
        settings: the candidates, in the table's order.
        ceilings: each one's loader-only rate, images a second.
        predicted: each one's prediction.
        race: the race; None: not run yet, or not at all.
    """
    rows = [
        f"{'setting':<16}{'loader img/s':>13}{'predicted s':>12}{'limit':>9}{'step x':>8}{'measured s':>11}"
        f"{'error':>8}{'speedup (95% CI)':>26}"
    ]
    for name in settings:
        p = predicted.get(name)
        measured = race.measured_s(name) if race is not None else math.nan
        err = relative_error(p.epoch_s, measured) if p is not None else math.nan
        s = race.speedup(name) if race is not None else None
        speed = f"{s[0]:.2f} ({s[1]:.2f}-{s[2]:.2f})" if s else ""
        rows.append(
            f"{name:<16}{ceilings.get(name, math.nan):>13,.0f}"
            f"{(p.epoch_s if p else math.nan):>12.3f}{(p.bound if p else ''):>9}"
            f"{(p.slowdown if p else math.nan):>8.2f}"
            + (f"{measured:>11.3f}{err:>+8.0%}" if not math.isnan(measured) else f"{'not raced':>11}{'':>8}")
            + f"{speed:>26}"
        )
    return "\n".join(rows)


def shared_cores(predicted: Dict[str, Prediction], cores: int, step_cores: float) -> str:
    """On a CPU, the line that says the step's compute is predicted longer beside workers: the table's `step x`."""
    head = f"On this CPU ({cores} cores, the step's threads on {step_cores:g})"
    worst = max(predicted, key=lambda n: predicted[n].slowdown, default=None)
    if worst is None or predicted[worst].slowdown <= 1 + STRETCH:
        return f"{head}: the workers' fetches fit beside the step; its compute is predicted as it is (step x)."
    return (
        f"{head}: the workers take the cores the step uses: its compute is predicted up to "
        f"{predicted[worst].slowdown:.2f}x longer ({worst}), in the predictions above (step x)."
    )


# NOTE [ The time outside the training loader ]
# The race times the training loader's epochs. The user's epoch also holds what the script does between two of
# them: evaluation, saving, logging. No loader setting shortens that, so a pick's speedup of the whole epoch is
# smaller: Lightning validating 64 items after 320 was claimed 3.50x and ran 2.37x (benchmarks/truth.py). The
# watch logs the script's own time between its epochs (between_epochs_s, its figures sent before the clock
# starts). A window's share of it goes to both sides of the speedup and of its interval's ends. A script whose
# epochs the runs never finished (one long epoch, a stream) shows none, and its figure is the loader's.
# The HF Trainer builds its evaluation loader from the same TrainingArguments fields, which the runs do not
# change: there the truth lies between that time unchanged and as much faster as the training loader. The
# interval spans both; the estimate is their geometric mean (the panel's HF case: 2.89x and 3.81x, ran 3.36x).


def outside_share(runs: Sequence[Measured]) -> float:
    """The script's own time between two epochs, a window's share of it (median over `runs`); 0: none seen."""
    shares = []
    for m in runs:
        between, epochs = m.summary.get(names.BETWEEN_EPOCHS_S), m.summary.get(names.SCRIPT_EPOCHS)
        if between is None or not epochs or not m.epochs:
            continue
        epoch_batches = m.summary.get(names.SCRIPT_BATCHES, 0.0) / epochs
        window = statistics.median(e.get("batches", epoch_batches) for e in m.epochs)
        shares.append(between * min(window / epoch_batches, 1.0) if epoch_batches else between)
    return statistics.median(shares) if shares else 0.0


def whole_epoch(speedup: tuple, current_s: float, outside_s: float) -> tuple:
    """`speedup` (estimate, low, high) of an epoch of `current_s` with `outside_s` more on both sides."""
    return tuple((current_s + outside_s) / (current_s / s + outside_s) for s in speedup)


def memory_cost(race: RaceResult, name: str) -> str:
    """The pick's RAM and VRAM peaks against the current setting's, from their race runs; RAM is PSS, else RSS."""
    parts = []
    peaks = (((names.RAM_PEAK_PSS_MB, names.RAM_PEAK_RSS_MB), "RAM"), ((names.VRAM_PEAK_DEVICE_MB,), "VRAM"))
    for keys, label in peaks:
        for key in keys:
            mine, base = race.mean(name, key), race.mean(BASELINE, key)
            if not (math.isnan(mine) or math.isnan(base)):
                said = f"{label} (RSS: shared pages counted in each process)" if key == names.RAM_PEAK_RSS_MB else label
                parts.append(f"{said} {mine:,.0f} MB against {base:,.0f} MB ({mine - base:+,.0f} MB)")
                break
    return "; ".join(parts) or "no memory figure (runs too short for the sampler)"


def why_keep(
    race: Optional[RaceResult],
    raced: Sequence[str],
    predicted: Dict[str, Prediction],
    data_bound: bool,
    on_cpu: bool,
    margin: float,
) -> str:
    """Why no candidate is recommended, from what was measured; with no race, from what was predicted.

    Args:
        race: the race; None: not run.
        raced: the candidates it raced.
        predicted: each candidate's prediction.
        data_bound: whether the step waited for data enough to search.
        on_cpu: whether the step computes on the host's cores.
        margin: the gain a candidate must show.
    """
    if not data_bound:
        return "the step hardly waits for data: no loader setting can make the epoch shorter."
    if race is None or not raced:
        worst = max((p.slowdown for p in predicted.values()), default=1.0)
        if on_cpu and worst > 1.2:
            return (
                f"no candidate is predicted faster by more than {margin:.0%}: on this CPU the workers' fetches "
                f"would take turns with the step on the cores its threads fill (its compute stretched up to "
                f"{worst:.1f}x); a step on fewer threads (trainer.threads) would leave them a core, which "
                "wif-advise does not try (docs/advise.md shows how to race it)."
            )
        return f"no candidate is predicted faster than the current setting by more than {margin:.0%}."
    reasons = []
    for name in raced:
        said = "its race did not show it faster"
        s = race.speedup(name)
        if s:
            said += f" (speedup {s[0]:.2f}, 95% interval {s[1]:.2f}-{s[2]:.2f})"
        mine = [m.mean(names.COMPUTE_S) for m in race.runs.get(name, [])]
        theirs = [m.mean(names.COMPUTE_S) for m in race.runs.get(BASELINE, [])]
        if on_cpu and mine and theirs and sum(mine) / len(mine) > (1 + STRETCH) * sum(theirs) / len(theirs):
            said += (
                f"; the step's compute took {sum(mine) / len(mine):.3f} s an epoch against "
                f"{sum(theirs) / len(theirs):.3f} s: the workers take the cores the step uses"
            )
        reasons.append(f"{name}: {said}")
    return "; ".join(reasons) + "."
