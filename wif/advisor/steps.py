"""The advice's four steps, in order, within the minutes it states at its start (`--minutes`):

1. where the time goes: the configured setting's epochs split, the compute bound, the loader's ceiling;
2. candidates: loader-only trials, each one's epoch predicted (wif.advisor.predict);
3. verified: the current setting raced against the best predicted (wif.advisor.verify), in the time left;
4. the answer: the pick with its speedup interval and memory cost, or keep what you have.

One MLflow parent run (wif.kind=advise) with every run nested under it; an interruption or an error ends
every one of them still open (KILLED for Ctrl-C or SIGTERM, else FAILED), none is left RUNNING.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import psutil

from wif.advisor import answer, candidates, workload
from wif.advisor.advice import ANSWER_S, MIN_RACE_EPOCHS, TRIAL_EPOCHS, Advice, Options, log_answer, race_epochs
from wif.advisor.predict import CLOSE, Prediction, batch_sizes, cannot_win, close_call, distinct, predict, rank
from wif.advisor.runner import SKIPPED, Candidate, Measured, Runner, loader_only, training
from wif.advisor.verify import RaceResult, run_race
from wif.config import Config, as_plain
from wif.measure.lifetime import signals_held
from wif.measure.sysinfo import usable_cores
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.report.race import RaceRules
from wif.run.supervise import resolve_device
from wif.tools.tune import search_workers

PROG = "wif-advise"


def advise(
    base: Config,
    overrides: Sequence[str],
    opts: Options,
    say: Callable[[str], None] = print,
    make_runner: Callable[..., Runner] = Runner,
) -> Advice:
    """Measure, predict, race and answer for the configuration `base` (composed from `overrides`); `make_runner`:
    what runs the measurements (wif.advisor.script's runs a user's script under wif.watch)."""
    t0 = time.monotonic() if opts.started is None else opts.started
    device = resolve_device(base.device)
    cuda, cores = device == "cuda", usable_cores()
    overrides = list(overrides) + workload.whole_folder(base, overrides)
    say(f"{PROG}: {workload.data_line(base, workload.training_items(base))}")
    say(
        f"{PROG}: within {opts.minutes:g} minutes (--minutes): the race stops once its answer is settled, or "
        "before a block that would end later"
    )
    tracker = Tracker(base.tracking.uri, base.tracking.experiment)
    advise_id = time.strftime("%Y%m%d-%H%M%S") + f"-{id(base) % 100000}"
    with signals_held():  # a Ctrl-C while the record is made: the record exists, and is ended below
        parent = tracker.start_run(
            "advise",
            as_plain(base),
            {"wif.kind": "advise", "wif.advise_id": advise_id, "wif.advise_role": "parent"},
            as_plain(base),
        )
    deadline = t0 + 60 * opts.minutes - min(ANSWER_S, 6 * opts.minutes)  # its answer too within the minutes
    runner = make_runner(tracker, device, parent, advise_id, deadline, say)
    try:
        out = _advise(base, overrides, opts, runner, cuda, cores, say)
        out.seconds, out.runs = time.monotonic() - t0, len(runner.runs)
        out.contention = workload.contention_line(runner.runs, base.measure.contended_pct, runner.reruns)
        log_answer(tracker, parent, out, runner.runs)
    except BaseException:
        with signals_held():  # a second Ctrl-C must not cut the clean-up short
            end_open_runs(tracker, advise_id, KILLED if sys.exc_info()[0] is KeyboardInterrupt else FAILED)
        raise
    tracker.end_run(parent, FINISHED)
    return out


def end_open_runs(tracker: Tracker, advise_id: str, status: str) -> None:
    """End every run of this advice still RUNNING, the parent and the nested ones, with `status`."""
    found = tracker.client.search_runs(
        [tracker.experiment_id],
        f"tags.`wif.advise_id` = '{advise_id}' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    for run in found:
        tracker.end_run(run.info.run_id, status)


def _advise(
    base: Config,
    overrides: Sequence[str],
    opts: Options,
    runner: Runner,
    cuda: bool,
    cores: int,
    say: Callable[[str], None],
) -> Advice:
    bs = base.data.batch_size
    cur = candidates.current(base, cuda)
    say(f"{PROG}: 1/4 where the time goes: the configured setting, {opts.epochs} epochs (the first left out)")
    now = runner.run(training(base, cur, opts.epochs), "measure", "current")
    if not now.ok:
        raise RuntimeError(f"the configured setting failed: {now.error}")
    items, sizes = now.n_train, batch_sizes(now.n_train, bs)
    bconf = runner.bound(base, opts.epochs, items)
    fixed = runner.run(bconf, "bound", "fixed") if bconf is not None else None
    # Two epochs without a data wait: the configured run's own step time, and the bound's run. The lower is what
    # an epoch can attain (a single bound run can be slow by noise); the race verifies any gain it promises.
    blocked = now.mean("gpu_blocked_s")  # CUDA only: the GPU's own work, waited for in a blocking copy
    bound_s = now.mean("compute_s") + now.mean("copy_s") + (0.0 if math.isnan(blocked) else blocked)
    source = "the configured run's own step time"
    if fixed is not None and not fixed.ok:
        say(f"  {runner.bound_label} failed ({fixed.error}): {source} stands for it")
    if fixed is not None and fixed.ok and (math.isnan(bound_s) or fixed.median() <= bound_s):
        bound_s, source = fixed.median(), runner.bound_label
    elif fixed is not None and fixed.ok and fixed.median() > now.median() * (1 + opts.bound_margin):
        # e.g. a model that meets denormals on the same random batch (below that, it stays in the picture)
        say(
            f"  {runner.bound_label} took {fixed.median():.3f} s an epoch, more than the configured setting's "
            f"{now.median():.3f} s: not a bound here, so {source} stands for it"
        )
        fixed = None
    ceilings: Dict[str, float] = {}
    trials: Dict[str, Measured] = {}
    cut: List[str] = []  # candidates whose trial the minutes cut short or never started
    step = candidates.step_rates(now, fixed, bs, cores, not cuda)
    n_trial = min(len(sizes), opts.batches)

    def trial(cand: Candidate) -> Optional[float]:
        if cand.workers == 0 and cur.workers == 0 and not cand.keys.keys() - {"loader.num_workers"}:
            ceilings[cand.name] = items / now.mean("data_wait_s")  # the configured run fetched in-process
            return ceilings[cand.name]
        m = runner.run(loader_only(base, cand, n_trial, TRIAL_EPOCHS), "loader", cand.name)
        if m.ok:
            ceilings[cand.name] = min(m.n_train, n_trial * bs) / m.median()
        say(
            f"  loader only {cand.name:<16} "
            + (f"{ceilings[cand.name]:>9,.0f} img/s" if m.ok else f"{m.status}: {m.error}")
        )
        if not m.ok:
            cut.extend([cand.name] if m.status == SKIPPED or "ran out" in m.error else [])
            return None
        trials[cand.name] = m
        return ceilings[cand.name]

    if cur.workers > 0:
        trial(cur)
    else:
        trial(candidates.workers(base, 0, cuda))
    bound_compute = fixed.mean("compute_s") if fixed is not None and fixed.ok else math.nan
    data_bound, sentence, held = answer.where_time_goes(
        now,
        bound_s,
        source,
        items,
        ceilings.get("current", ceilings.get("w0", math.nan)),
        opts.bound_margin,
        cur.workers,
        bound_compute,
        cuda,
    )
    say(sentence)
    # On a GPU, workers move the loader's host work off the thread that launches the step: they are tried. On a
    # CPU they would only move it to the cores the step computes on.
    searched = data_bound or (held.kind == "interference" and cuda)

    made: Dict[str, Candidate] = {"current": cur}

    def rated(cand: Candidate) -> Prediction:
        """The candidate's epoch predicted from its trial (or, at 0 workers, the configured run's own fetch)."""
        if cand.name in trials:
            return predict(sizes, step, candidates.loader_rates(trials[cand.name], cand, bs, n_trial, cores), cores)
        return predict(sizes, step, candidates.in_process_rates(now, cand, bs), cores)

    def by_workers(w: int, phase: str) -> Optional[float]:
        cand = candidates.workers(base, w, cuda)
        made[cand.name] = cand
        return trial(cand)

    def beaten(w: int, best: int) -> bool:  # fewer workers than the best, predicted unable to beat it: no trial
        top = f"w{best}"
        return (
            w < best
            and top in trials
            and cannot_win(items, w, ceilings.get("w0", math.nan), rated(made[top]).epoch_s, opts.margin)
        )

    if searched:
        say(
            f"{PROG}: 2/4 candidates: loader-only trials of up to {n_trial} batches, num_workers searched as "
            f"wif-tune does (0..{2 * cores}, persistent workers)"
        )
        best_w = search_workers(by_workers, 2 * cores, 4, 3, 0.05, beaten)
        best = candidates.workers(base, best_w or 0, cuda)
        knobs = [] if runner.knobs else candidates.resident(base, cuda)  # no loader beside the step at all
        if best.name in trials and rated(best).bound == "compute":  # the loader keeps up: its knobs cannot gain
            say(f"  {best.name} is predicted to feed the step faster than it computes: no other loader knob is tried")
        else:
            knobs[:0] = (runner.knobs or candidates.extras)(base, best, cuda, psutil.virtual_memory().available, items)
        for extra in knobs:
            made[extra.name] = extra
            trial(extra)
    else:  # the answer is settled: no loader setting can shorten an epoch that does not wait for data
        say(f"{PROG}: 2/4 candidates: none tried (not data-bound: no loader setting can shorten the epoch)")
        if cur.workers == 0:
            by_workers(0, "coarse")  # the configured run's own fetch, no run: the table's current row
    predicted = {name: rated(cand) for name, cand in made.items() if name in trials or name in ceilings}
    if "current" not in predicted and "w0" in predicted:
        predicted["current"] = predicted["w0"]
    ceilings.setdefault("current", ceilings.get("w0", math.nan))
    # The configured setting as predicted; where its trial never ran (--minutes ran out), as measured.
    current_pred = predicted["current"].epoch_s if "current" in predicted else now.median()
    # the candidates: every setting predicted but the configured one (w0 is it where it has 0 workers)
    others = {n: p.epoch_s for n, p in predicted.items() if n not in ("current", "w0" if cur.workers == 0 else "")}
    ranked = rank(list(others.items()), current_pred, opts.margin)
    raced = distinct(ranked, predicted, opts.race_candidates, opts.margin) if searched else []
    close = close_call(others, current_pred) if searched and not raced else None
    raced = [close] if close else raced  # "keep" from a prediction this close is verified by the race instead
    order = ["current"] + sorted(
        (n for n in predicted if n != "current" and not (n == "w0" and cur.workers == 0)),
        key=lambda n: predicted[n].epoch_s,
    )
    say(answer.candidate_table(order, ceilings, predicted, None))
    if not cuda:
        say(answer.shared_cores(predicted, cores, step.cores))

    race: Optional[RaceResult] = None
    unverified = ""
    epochs = race_epochs(runner.left_s(), now, [predicted[n].epoch_s for n in raced], opts, base.trainer.warmup_epochs)
    if close and epochs < MIN_RACE_EPOCHS:  # no time to verify a close call: the prediction's "keep" stands
        raced = []
    if raced and epochs >= MIN_RACE_EPOCHS:
        rules = RaceRules(opts.min_blocks, opts.max_blocks, opts.margin)
        say(
            f"{PROG}: 3/4 the race: current against {', '.join(raced)} (trainer.epochs=auto up to {epochs}, "
            f"blocks {opts.min_blocks}..{opts.max_blocks}, {runner.left_s():.0f} s left)"
            + (
                f"; a close call: {close} is predicted within {CLOSE:.0%} of the current setting, more closely "
                "than the prediction can tell on this machine"
                if close
                else ""
            )
        )
        race = run_race(runner, base, [cur] + [made[n] for n in raced], rules, epochs, say)
    elif raced:
        unverified = (
            f"the race had no time left within --minutes {opts.minutes:g} ({opts.min_blocks} blocks of "
            f"{len(raced) + 1} runs need more than the {max(runner.left_s(), 0):.0f} s left), so "
            f"{raced[0]}, predicted {current_pred / predicted[raced[0]].epoch_s:.2f}x faster, is not "
            "verified: give it more --minutes."
        )
        say(f"{PROG}: 3/4 the race: not run: {unverified}")
        raced = []
    elif cut:
        unverified = (
            f"--minutes {opts.minutes:g} ran out while the candidates were tried ({', '.join(cut)} not measured): "
            "give it more --minutes."
        )
        say(f"{PROG}: 3/4 the race: not run: {unverified}")
    else:
        say(
            f"{PROG}: 3/4 the race: nothing to race ("
            + (
                "not data-bound"
                if not searched
                else f"no candidate is predicted faster than the current setting by more than {opts.margin:.0%}"
            )
            + ")"
        )
    table = answer.candidate_table(order, ceilings, predicted, race)
    faster = race.faster() if race is not None else []
    pick = faster[0] if faster else None
    png = Path(tempfile.mkdtemp(prefix="wif-advise-")) / "epoch_split.png"
    shown = (
        [now]
        + ([m for n in ["current"] + raced for m in race.runs.get(n, [])[:1]] if race else [])
        + ([fixed] if fixed is not None else [])
    )
    pic = answer.picture(shown, bound_s, source, png)
    out = Advice(
        data_bound,
        sentence,
        pick,
        None,
        None,
        None,
        "",
        table,
        runner.parent_id,
        0,
        0.0,
        str(pic) if pic else None,
        {n: p.epoch_s for n, p in predicted.items()},
        {n: race.measured_s(n) for n in ["current"] + raced} if race else {},
    )
    out.limit = held
    if pick is not None:
        r = race.table.loc[pick]
        out.speedup = (float(r["speedup"]), float(r["speedup_ci_low"]), float(r["speedup_ci_high"]))
        out.train_line = answer.train_line(overrides, made[pick])
        out.dataloader = answer.dataloader_kwargs(made[pick], base.loader.pin_memory)
        out.loader_args = answer.loader_args(made[pick], base.loader.pin_memory)
        out.why = answer.memory_cost(race, pick)
    else:
        out.why = unverified or answer.why_keep(race, raced, predicted, searched, not cuda, opts.margin)
    return out
