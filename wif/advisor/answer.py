"""What `wif-advise` says: where the time goes, the candidates' predicted and measured epochs, the pick
(or why to keep the current setting), the lines to paste, and the picture of each epoch's split."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from wif.advisor.limit import Figures, Limit, name_limit
from wif.advisor.predict import Prediction, relative_error
from wif.advisor.runner import Candidate, Measured
from wif.advisor.verify import BASELINE, RaceResult
from wif.config.compose import STUDY_COMMAND

STRETCH = 0.1  # a step's compute predicted or measured longer than this share beside workers: they share its cores
# gpu_blocked_s (CUDA only): a blocking copy's wait behind the GPU's queued work, kept out of data wait and copy
PHASES = (
    ("data_wait_s", "data wait"),
    ("copy_s", "copy"),
    ("gpu_blocked_s", "GPU blocked"),
    ("compute_s", "compute"),
    ("gpu_idle_s", "GPU idle"),
)


def where_time_goes(
    now: Measured,
    bound_s: float,
    bound_source: str,
    items: int,
    loader_img_s: float,
    margin: float,
    workers: int = 0,
    bound_compute_s: float = math.nan,
    on_gpu: bool = False,
) -> tuple[bool, str, Limit]:
    """(whether the wait is worth a search, the sentence, what holds the epoch): the configured epoch against the
    bound and the loader's ceiling. "Data-bound" is said only where the loader is slower than the model: where it
    is faster but loads between steps (`workers` 0), its wait is exposed, not a limit, and workers would overlap
    it."""
    model_img_s = items / bound_s if bound_s > 0 else math.nan
    held = limit_of(now, margin, bound_compute_s, on_gpu, exposed=loader_img_s > model_img_s)
    return (*_sentence(now, bound_s, bound_source, loader_img_s, model_img_s, margin, workers, held), held)


def _sentence(
    now: Measured,
    bound_s: float,
    bound_source: str,
    loader_img_s: float,
    model_img_s: float,
    margin: float,
    workers: int,
    held: Limit,
) -> tuple[bool, str]:
    epoch = now.median()
    gap = epoch / bound_s - 1 if bound_s > 0 else math.nan
    split = ", ".join(f"{label} {now.mean(key):.3f} s" for key, label in PHASES if not math.isnan(now.mean(key)))
    head = f"The configured setting: {epoch:.3f} s an epoch ({split}); the bound ({bound_source}): {bound_s:.3f} s."
    wait = (now.mean("data_wait_s") + _zero(now.mean("gpu_idle_s"))) / epoch
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
    rates = f"the loader gives {loader_img_s:,.0f} img/s, the model takes {model_img_s:,.0f}"
    waited = f"epochs are {gap:.0%} slower than the bound (data wait {now.mean('data_wait_s') / epoch:.0%})"
    if math.isnan(loader_img_s):  # its trial never ran (--minutes ran out): which of the two is not known
        return True, (
            f"{head}\nWaiting for data: {waited}; the loader's own rate was not measured (its trial did not run), "
            f"so whether it limits the epoch or only loads between steps is not known.{what}"
        )
    if loader_img_s > model_img_s:  # the loader keeps up: its time shows only because it is not overlapped
        how = "at 0 workers each batch is loaded between two steps" if workers == 0 else "the prefetch runs dry"
        return True, (
            f"{head}\nThe loader's time is exposed, not a limit: {rates}, but {how}, so {waited}; "
            f"workers overlap the loading with the step.{what}"
        )
    return True, f"{head}\nData-bound: {rates}; {waited}.{what}"


def _zero(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def limit_of(
    now: Measured, margin: float, bound_compute_s: float = math.nan, on_gpu: bool = False, exposed: bool = False
) -> Limit:
    """What holds the configured run's steady epochs (wif.advisor.limit), from its figures and the bound's step;
    `exposed`: the loader is faster than the model (its wait is said as the wait, not as the loader)."""
    busy = now.mean("gpu_util_pct") / 100.0
    return name_limit(
        Figures(
            now.median(),
            now.mean("data_wait_s"),
            _zero(now.mean("copy_s")),
            now.mean("compute_s"),
            bound_compute_s,
            _zero(now.mean("gpu_blocked_s")),
            None if math.isnan(busy) else busy,
            on_gpu,
            exposed,
        ),
        margin,
    )


def candidate_table(
    names: Sequence[str], ceilings: Dict[str, float], predicted: Dict[str, Prediction], race: Optional[RaceResult]
) -> str:
    """One row a candidate: loader-only ceiling, predicted epoch, and for raced ones measured and error."""
    rows = [
        f"{'setting':<16}{'loader img/s':>13}{'predicted s':>12}{'limit':>9}{'step x':>8}{'measured s':>11}"
        f"{'error':>8}{'speedup (95% CI)':>26}"
    ]
    for name in names:
        p = predicted.get(name)
        measured = race.measured_s(name) if race is not None else math.nan
        err = relative_error(p.epoch_s, measured) if p is not None else math.nan
        speed = ""
        if race is not None and race.table is not None and name in race.table.index and name != BASELINE:
            r = race.table.loc[name]
            speed = f"{r['speedup']:.2f} ({r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f})"
        rows.append(
            f"{name:<16}{ceilings.get(name, math.nan):>13,.0f}"
            f"{(p.epoch_s if p else math.nan):>12.3f}{(p.bound if p else ''):>9}"
            f"{(p.slowdown if p else math.nan):>8.2f}"
            + (f"{measured:>11.3f}{err:>+8.0%}" if not math.isnan(measured) else f"{'not raced':>11}{'':>8}")
            + f"{speed:>26}"
        )
    return "\n".join(rows)


def shared_cores(predicted: Dict[str, Prediction], cores: int, step_cores: float) -> str:
    """Before the race, what the prediction already knows of the machine: on a CPU the workers' fetches and the
    step share its cores, so the step's compute is predicted longer beside workers (the table's `step x`)."""
    head = f"On this CPU ({cores} cores, the step's threads on {step_cores:g})"
    worst = max(predicted, key=lambda n: predicted[n].slowdown, default=None)
    if worst is None or predicted[worst].slowdown <= 1 + STRETCH:
        return f"{head}: the workers' fetches fit beside the step; its compute is predicted as it is (step x)."
    return (
        f"{head}: the workers take the cores the step uses: its compute is predicted up to "
        f"{predicted[worst].slowdown:.2f}x longer ({worst}), in the predictions above (step x)."
    )


def memory_cost(race: RaceResult, name: str) -> str:
    """The pick's RAM (PSS, else RSS) and VRAM peaks against the current setting's, from their race runs."""
    parts = []
    for keys, label in ((("ram_peak_pss_mb", "ram_peak_rss_mb"), "RAM"), (("vram_peak_device_mb",), "VRAM")):
        for key in keys:
            mine, base = race.mean(name, key), race.mean(BASELINE, key)
            if not (math.isnan(mine) or math.isnan(base)):
                parts.append(f"{label} {mine:,.0f} MB against {base:,.0f} MB ({mine - base:+,.0f} MB)")
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
    """Why no candidate is recommended, from what was measured (or, with no race, predicted)."""
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
        if race.table is not None and name in race.table.index:
            r = race.table.loc[name]
            said = (
                f"its race did not show it faster (speedup {r['speedup']:.2f}, 95% interval "
                f"{r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f})"
            )
        mine = [m.mean("compute_s") for m in race.runs.get(name, [])]
        theirs = [m.mean("compute_s") for m in race.runs.get(BASELINE, [])]
        if on_cpu and mine and theirs and sum(mine) / len(mine) > (1 + STRETCH) * sum(theirs) / len(theirs):
            said += (
                f"; the step's compute took {sum(mine) / len(mine):.3f} s an epoch against "
                f"{sum(theirs) / len(theirs):.3f} s: the workers take the cores the step uses"
            )
        reasons.append(f"{name}: {said}")
    return "; ".join(reasons) + "."


def train_line(overrides: Sequence[str], pick: Candidate) -> str:
    """The `wif-study` line applying the pick, keeping the user's other overrides."""
    mine = set(pick.keys)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in mine]
    return " ".join([STUDY_COMMAND, *kept, *pick.overrides()])


def loader_args(pick: Candidate, pin: bool) -> Dict[str, Any]:
    """The pick's DataLoader keyword arguments, by name (a framework's own fields are made from them)."""
    k = pick.keys
    args: Dict[str, Any] = {"num_workers": pick.workers}
    if pick.workers > 0:
        args.update(persistent_workers=pick.persistent, prefetch_factor=pick.prefetch)
    args["pin_memory"] = bool(k.get("loader.pin_memory", pin))
    if k.get("loader.in_order") is False:
        args["in_order"] = False
    return args


def dataloader_kwargs(pick: Candidate, pin: bool) -> str:
    """The DataLoader keyword arguments (and the copy's) to paste into one's own script."""
    k = pick.keys
    if k.get("transfer.kind") == "resident":
        return "no DataLoader: the whole dataset moved to the device once, each batch gathered there by index"
    if k.get("engine.name") not in (None, "dataloader"):
        return f"engine={k['engine.name']} (not a DataLoader: {pick.workers} threads of torchdata.nodes)"
    args = {key: value for key, value in loader_args(pick, pin).items() if key != "in_order"}
    line = f"DataLoader(dataset, batch_size=..., shuffle=True, {', '.join(f'{k}={v}' for k, v in args.items())})"
    if k.get("data.preload"):  # the gain is partly the dataset's: the loader's arguments alone would not give it
        line = "a dataset that holds its decoded images in RAM (wif's data.preload=true), " + line
    return line + ("; copy with .to(device, non_blocking=True)" if pick.copy_hidden else "")


def picture(runs: Sequence[Measured], bound_s: float, bound_source: str, path: Path) -> Optional[Path]:
    """Each setting's steady epoch as stacked phases, beside the bound: a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: List[str] = []
    ok = [m for m in runs if m.ok]
    phases = [(key, label) for key, label in PHASES if any(not math.isnan(m.mean(key)) for m in ok)]  # CUDA's alone
    parts: Dict[str, List[float]] = {label: [] for _, label in phases}
    parts["other"] = []
    for m in ok:
        names.append(f"{m.name} ({m.role})")
        total, shown = m.mean("epoch_time_s"), 0.0
        for key, label in phases:
            v = m.mean(key)
            v = 0.0 if math.isnan(v) else v
            parts[label].append(v)
            shown += v
        parts["other"].append(max(total - shown, 0.0))
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 0.5 * len(names) + 1.5))
    left = [0.0] * len(names)
    for label, values in parts.items():
        ax.barh(names, values, left=left, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.axvline(bound_s, color="black", linestyle="--", label=f"bound ({bound_source})")
    ax.set_xlabel("seconds per epoch (steady epochs' mean)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the bars, never over them
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
