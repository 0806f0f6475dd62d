"""The advice's steps in order, within the minutes it states at its start, `--minutes`.

1. Where the time goes: the configured setting's epochs split, the compute bound, the loader's ceiling.
2. Candidates: loader-only trials, each one's epoch predicted (wif.advisor.predict).
3. Verified: the current setting raced against the best predicted (wif.advisor.verify), in the time left.
4. The answer: the pick with its speedup interval and memory cost, or keep what you have.

Every run nests under one parent run, tagged wif.kind=advise. An interruption or an error ends every run
still open: KILLED for Ctrl-C or SIGTERM, else FAILED.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

import psutil

from wif.advisor import answer, candidates, workload
from wif.advisor.advice import ANSWER_S, PROG, Advice, Options, log_answer, race_reserve_s
from wif.advisor.answer import Bound
from wif.advisor.candidates import Candidate, training
from wif.advisor.choice import give_answer, predict_candidates, race_candidates
from wif.advisor.limit import or_zero
from wif.advisor.mode import Harness, Mode
from wif.advisor.predict import batch_sizes
from wif.advisor.runner import Measured, Recording
from wif.advisor.trials import Context, Found, Measurement, Trials, step_rates
from wif.config import Config, as_plain
from wif.measure import names
from wif.measure.lifetime import signals_held
from wif.measure.nvml import resolve_device
from wif.measure.sysinfo import usable_cores
from wif.measure.tracking import ANSWER_WITHIN_S, FAILED, FINISHED, KILLED, Tracker
from wif.tools.worker_search import double_workers

# NOTE [ The bound ]
# Two epochs run without a data wait: the configured run's own step time, and the bound's run. The lower is
# what an epoch can attain: a single bound run can be slow by noise. The race verifies any gain it promises.
# A bound run slower than the configured setting by more than --bound-margin is no bound: for example a
# model that meets denormals on the same random batch. Below that margin, it stays in the picture.


def advise(
    base: Config,
    overrides: Sequence[str],
    opts: Options,
    say: Callable[[str], None] = print,
    mode: Optional[Mode] = None,
) -> Advice:
    """Measure, predict, race and answer for the configuration `base`, composed from `overrides`.

    Args:
        base: the configuration.
        overrides: the command line's overrides that composed it.
        opts: the advice's options.
        say: where its lines go.
        mode: train.py's harness (None: `Harness()`) or a user's script (wif.advisor.script.mode.Script).
    """
    mode = Harness() if mode is None else mode
    t0 = time.monotonic() if opts.started is None else opts.started
    device = resolve_device(base.device)
    cuda, cores = device == "cuda", usable_cores()
    overrides = list(overrides) + workload.whole_folder(base, overrides)
    mode.introduce(opts, say)
    say(f"{PROG}: {workload.data_line(base, workload.training_items(base))}")
    say(
        f"{PROG}: within {opts.minutes:g} minutes (--minutes): the race stops once its answer is settled, or "
        "before a block that would end later"
    )
    tracker = Tracker(base.tracking.uri, base.tracking.experiment, answer_within_s=ANSWER_WITHIN_S)
    advise_id = time.strftime("%Y%m%d-%H%M%S") + f"-{id(base) % 100000}"
    with signals_held():  # a Ctrl-C while the record is made: the record exists, and is ended below
        tags = {names.TAG_KIND: "advise", names.TAG_ADVISE_ID: advise_id, names.TAG_ADVISE_ROLE: "parent"}
        parent = tracker.start_run("advise", as_plain(base), tags, as_plain(base))
    deadline = t0 + 60 * opts.minutes - min(ANSWER_S, 6 * opts.minutes)  # its answer too within the minutes
    recording = Recording(tracker=tracker, device=device, parent_id=parent, advise_id=advise_id)
    runner = mode.runner(recording, opts=opts, deadline=deadline, say=say)
    try:
        ctx = Context(
            base=base, overrides=overrides, opts=opts, mode=mode, runner=runner, cuda=cuda, cores=cores, say=say
        )
        out = _advise(ctx)
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
        f"tags.`{names.TAG_ADVISE_ID}` = '{advise_id}' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    for run in found:
        tracker.end_run(run.info.run_id, status)


def _advise(ctx: Context) -> Advice:
    """The advice's pipeline: measure, candidates, predict, race, answer; each takes what the one before returned."""
    measured = measure(ctx)
    trials = Trials(ctx=ctx, measured=measured)
    found = find_limit(trials)
    trials = search_candidates(trials, found)
    predicted = predict_candidates(trials, found)
    raced = race_candidates(trials, predicted)
    return give_answer(trials, found, predicted, raced)


def measure(ctx: Context) -> Measurement:
    """Step 1: the configured setting's epochs, and the bound's run: what an epoch can attain."""
    base, opts, runner = ctx.base, ctx.opts, ctx.runner
    current = candidates.current(base, ctx.cuda)
    ctx.say(f"{PROG}: 1/4 where the time goes: the configured setting, {opts.epochs} epochs (the first left out)")
    current_run = runner.run(training(base, current, opts.epochs), "measure", "current")
    if not current_run.ok:
        raise RuntimeError(f"the configured setting failed: {current_run.error}")
    bound_conf = ctx.mode.bound(base, opts.epochs, current_run.n_train)
    bound_run = runner.run(bound_conf, "bound", "fixed") if bound_conf is not None else None
    bound_run, bound = _bound(ctx, current_run, bound_run)
    bs = base.data.batch_size
    return Measurement(
        current=current,
        current_run=current_run,
        bound_run=bound_run,
        bound=bound,
        sizes=batch_sizes(current_run.n_train, bs),
        step=step_rates(current_run, bound_run, batch_size=bs, cores=ctx.cores, on_cpu=not ctx.cuda),
    )


def _bound(ctx: Context, current_run: Measured, bound_run: Optional[Measured]) -> Tuple[Optional[Measured], Bound]:
    """The bound's run, said where it failed or was no bound (then None). See NOTE [ The bound ]."""
    label = ctx.mode.bound_label
    blocked = or_zero(current_run.mean(names.GPU_BLOCKED_S))  # CUDA only: the GPU's own work, in a blocking copy
    bound_s = current_run.mean(names.COMPUTE_S) + current_run.mean(names.COPY_S) + blocked
    source = "the configured run's own step time"
    ok = bound_run is not None and bound_run.ok
    if bound_run is not None and not bound_run.ok:
        ctx.say(f"  {label} failed ({bound_run.error}): {source} stands for it")
    if ok and (math.isnan(bound_s) or bound_run.median() <= bound_s):
        bound_s, source = bound_run.median(), label
    elif ok and bound_run.median() > current_run.median() * (1 + ctx.opts.bound_margin):
        ctx.say(
            f"  {label} took {bound_run.median():.3f} s an epoch, more than the configured setting's "
            f"{current_run.median():.3f} s: not a bound here, so {source} stands for it"
        )
        bound_run = None
    measured = bound_run is not None and bound_run.ok
    wait = bound_run.mean(names.DATA_WAIT_S) if measured else math.nan
    return bound_run, Bound(
        epoch_s=bound_s,
        source=source,
        items=current_run.n_train,
        compute_s=bound_run.mean(names.COMPUTE_S) if measured else math.nan,
        data_wait_s=or_zero(wait),
    )


def find_limit(trials: Trials) -> Found:
    """Step 1's answer: the loader's ceiling from a first trial, then where the time goes and what holds it."""
    ctx, measured = trials.ctx, trials.measured
    current = measured.current
    trials.run_trial(current if current.workers > 0 else candidates.workers(ctx.base, 0, ctx.cuda))
    verdict = answer.where_time_goes(
        measured.current_run,
        measured.bound,
        loader_img_s=trials.ceilings.get("current", trials.ceilings.get("w0", math.nan)),
        margin=ctx.opts.bound_margin,
        workers=current.workers,
        on_gpu=ctx.cuda,
    )
    ctx.say(verdict.sentence)
    # workers move the loader's host work off the GPU's launching thread; on a CPU, only onto the step's cores
    searched = verdict.data_bound or (verdict.limit.kind == "interference" and ctx.cuda)
    return Found(data_bound=verdict.data_bound, sentence=verdict.sentence, limit=verdict.limit, searched=searched)


def search_candidates(trials: Trials, found: Found) -> Trials:
    """Step 2: num_workers searched as wif-tune does, then the other knobs at the best count."""
    ctx = trials.ctx
    if not found.searched:  # the answer is settled: no loader setting can shorten an epoch that does not wait for data
        ctx.say(f"{PROG}: 2/4 candidates: none tried (not data-bound: no loader setting can shorten the epoch)")
        if trials.measured.current.workers == 0:
            trials.by_workers(0, "coarse")  # the configured run's own fetch, no run: the table's current row
        return trials
    most = 2 * ctx.cores if ctx.opts.max_workers is None else ctx.opts.max_workers
    kept = race_reserve_s(trials.measured.current_run, ctx.opts, left_s=ctx.runner.left_s())
    ctx.say(
        f"{PROG}: 2/4 candidates: loader-only trials of up to {trials.batches} batches, num_workers doubled "
        f"(0..{most}, persistent workers); {kept:.0f} s kept for the race"
    )
    with ctx.runner.keeping(kept):
        best_w = double_workers(trials.by_workers, max_workers=most, min_gain=0.05, beaten=trials.beaten)
        best = candidates.workers(ctx.base, best_w or 0, ctx.cuda)
        for extra in _knobs(trials, best):
            trials.add(extra)
    return trials


def _knobs(trials: Trials, best: Candidate) -> List[Candidate]:
    """The mode's other knobs at the best worker count, and its settings with no loader beside the step."""
    ctx, mode = trials.ctx, trials.ctx.mode
    resident = mode.resident(ctx.base, ctx.cuda)  # no loader beside the step at all
    if best.name in trials.runs and trials.predicted(best).bound == "compute":  # its knobs cannot gain
        ctx.say(f"  {best.name} is predicted to feed the step faster than it computes: no other loader knob is tried")
        return resident
    free = psutil.virtual_memory().available
    return mode.knobs(ctx.base, best, ctx.cuda, ram_free_bytes=free, items=trials.measured.items) + resident
