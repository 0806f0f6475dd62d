"""`wif-advise`: why is my training slow, and what should I change. The same overrides as train.py.

    wif-advise preset=smoke data=custom data._target_=wif.advisor.examples.slow_reads

1. where the time goes: the configured setting's epochs split, the compute bound, the loader's ceiling;
2. candidates: loader-only trials, each one's epoch predicted (wif.advisor.predict);
3. verified: the current setting raced against the best predicted (wif.advisor.verify);
4. the answer: the pick with its speedup interval and memory cost, or keep what you have; the lines to
   paste; a picture. One MLflow parent run (wif.kind=advise) with every trial nested under it.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import psutil

from wif.advisor import answer, candidates
from wif.advisor.measure import Candidate, Measured, Runner, bound, loader_only, training
from wif.advisor.predict import Prediction, batch_sizes, predict, rank
from wif.advisor.verify import RaceResult, run_race
from wif.config import Config, ConfigError, as_plain
from wif.config.compose import load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from wif.data.loaders import silence_worker_count_warning
from wif.measure.sysinfo import usable_cores
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.report.race import RaceRules
from wif.run.supervise import resolve_device
from wif.run.training import preload
from wif.tools.tune import check_tunable, search_workers

PROG = "wif-advise"


@dataclass
class Options:
    epochs: int = 3  # measuring runs: epochs each, the first left out
    batches: int = 50  # loader-only trials: batches an epoch at most
    race_candidates: int = 2  # the best predicted raced against the current setting
    min_blocks: int = 2
    max_blocks: int = 4
    max_epochs: int = 12  # each race run: trainer.epochs=auto up to this
    margin: float = 0.02  # the race's tie margin, and the predicted gain a candidate needs to be raced
    bound_margin: float = 0.05  # within this of the bound: not data-bound


@dataclass
class Advice:
    """What `wif-advise` found: the verdict, the pick (None: keep what you have), and the lines."""

    data_bound: bool
    sentence: str
    pick: Optional[str]
    speedup: Optional[tuple]  # (estimate, low, high) against the current setting
    train_line: Optional[str]
    dataloader: Optional[str]
    why: str
    table: str
    parent_run_id: str
    runs: int
    seconds: float
    picture: Optional[str] = None
    predicted: Dict[str, float] = field(default_factory=dict)
    measured: Dict[str, float] = field(default_factory=dict)


def advise(base: Config, overrides: Sequence[str], opts: Options, say: Callable[[str], None] = print) -> Advice:
    """Measure, predict, race and answer for the configuration `base` (composed from `overrides`)."""
    t0 = time.monotonic()
    device = resolve_device(base.device)
    cuda, cores = device == "cuda", usable_cores()
    tracker = Tracker(base.tracking.uri, base.tracking.experiment)
    advise_id = time.strftime("%Y%m%d-%H%M%S") + f"-{id(base) % 100000}"
    parent = tracker.start_run("advise", as_plain(base), {"wif.kind": "advise", "wif.advise_id": advise_id,
                                                          "wif.advise_role": "parent"}, as_plain(base))
    runner = Runner(tracker, device, parent, advise_id)
    try:
        out = _advise(base, overrides, opts, runner, cuda, cores, say)
    except BaseException:
        tracker.end_run(parent, KILLED if sys.exc_info()[0] is KeyboardInterrupt else FAILED)
        raise
    out.seconds, out.runs = time.monotonic() - t0, len(runner.runs)
    tracker.log_metrics(parent, {"advise_seconds": out.seconds, "advise_runs": out.runs, "data_bound": out.data_bound,
                                 **({"speedup": out.speedup[0], "speedup_ci_low": out.speedup[1],
                                     "speedup_ci_high": out.speedup[2]} if out.speedup else {})})
    tracker.set_tags(parent, {"wif.advise.pick": out.pick or "keep", "wif.advise.sentence": out.sentence[:4000],
                              "wif.advise.train_line": out.train_line or ""})
    tracker.client.log_text(parent, out.table, "candidates.txt")
    if out.picture:
        tracker.client.log_artifact(parent, out.picture)
    tracker.end_run(parent, FINISHED)
    return out


def _advise(base: Config, overrides: Sequence[str], opts: Options, runner: Runner, cuda: bool, cores: int,
            say: Callable[[str], None]) -> Advice:
    bs = base.data.batch_size
    cur = candidates.current(base, cuda)
    say(f"{PROG}: 1/4 where the time goes: the configured setting, {opts.epochs} epochs (the first left out)")
    now = runner.run(training(base, cur, opts.epochs), "measure", "current")
    if not now.ok:
        raise RuntimeError(f"the configured setting failed: {now.error}")
    items, sizes = now.n_train, batch_sizes(now.n_train, bs)
    bconf = bound(base, opts.epochs)
    fixed = runner.run(bconf, "bound", "fixed") if bconf is not None else None
    bound_s, source = now.mean("compute_s") + now.mean("copy_s"), "the configured run's own step time"
    if fixed is not None and fixed.ok and fixed.median() <= now.median() * (1 + opts.bound_margin):
        bound_s, source = fixed.median(), "data=fixed"
    elif fixed is not None and fixed.ok:  # e.g. a model that meets denormals on the same random batch
        say(f"  data=fixed took {fixed.median():.3f} s an epoch, more than the configured setting's "
            f"{now.median():.3f} s: not a bound here, so {source} stands for it")
        fixed = None
    ceilings: Dict[str, float] = {}
    trials: Dict[str, Measured] = {}
    step = candidates.step_rates(now, fixed, bs, cores, not cuda)
    n_trial = min(len(sizes), opts.batches)

    def trial(cand: Candidate) -> Optional[float]:
        if cand.workers == 0 and cur.workers == 0 and not cand.keys.keys() - {"loader.num_workers"}:
            ceilings[cand.name] = items / now.mean("data_wait_s")  # the configured run fetched in-process
            return ceilings[cand.name]
        m = runner.run(loader_only(base, cand, n_trial, opts.epochs), "loader", cand.name)
        if m.ok:
            ceilings[cand.name] = min(m.n_train, n_trial * bs) / m.median()
        say(f"  loader only {cand.name:<16} " + (f"{ceilings[cand.name]:>9,.0f} img/s" if m.ok
                                                 else f"{m.status}: {m.error}"))
        if not m.ok:
            return None
        trials[cand.name] = m
        return ceilings[cand.name]

    if cur.workers > 0:
        trial(cur)
    else:
        trial(candidates.workers(base, 0, cuda))
    data_bound, sentence = answer.where_time_goes(now, bound_s, source, items, ceilings.get(
        "current", ceilings.get("w0", math.nan)), opts.bound_margin)
    say(sentence)

    say(f"{PROG}: 2/4 candidates: loader-only trials of up to {n_trial} batches, num_workers searched as wif-tune "
        f"does (0..{2 * cores}, persistent workers)")
    made: Dict[str, Candidate] = {"current": cur}
    counts = {}

    def by_workers(w: int, phase: str) -> Optional[float]:
        cand = candidates.workers(base, w, cuda)
        made[cand.name] = cand
        counts[w] = trial(cand)
        return counts[w]

    best_w = search_workers(by_workers, 2 * cores, 4, 3, 0.05)
    best = candidates.workers(base, best_w or 0, cuda)
    for extra in candidates.extras(base, best, cuda, psutil.virtual_memory().available):
        made[extra.name] = extra
        trial(extra)
    predicted: Dict[str, Prediction] = {}
    for name, cand in made.items():
        if name in trials:
            rates = candidates.loader_rates(trials[name], cand, bs, n_trial, cores)
        elif cand.workers == 0 and name in ceilings:
            rates = candidates.in_process_rates(now, cand, bs)
        else:
            continue
        predicted[name] = predict(sizes, step, rates, cores)
    if "current" not in predicted and "w0" in predicted:
        predicted["current"] = predicted["w0"]
    ceilings.setdefault("current", ceilings.get("w0", math.nan))
    current_pred = predicted["current"].epoch_s
    ranked = rank([(n, p.epoch_s) for n, p in predicted.items() if n not in ("current", "w0" if cur.workers == 0
                                                                               else "")], current_pred, opts.margin)
    raced = [n for n, _ in ranked[:opts.race_candidates]] if data_bound else []
    order = ["current"] + sorted((n for n in predicted if n != "current" and not (n == "w0" and cur.workers == 0)),
                                 key=lambda n: predicted[n].epoch_s)
    say(answer.candidate_table(order, ceilings, predicted, None))

    race: Optional[RaceResult] = None
    if raced:
        rules = RaceRules(opts.min_blocks, opts.max_blocks, opts.margin)
        say(f"{PROG}: 3/4 the race: current against {', '.join(raced)} (trainer.epochs=auto up to {opts.max_epochs}, "
            f"blocks {opts.min_blocks}..{opts.max_blocks})")
        race = run_race(runner, base, [cur] + [made[n] for n in raced], rules, opts.max_epochs, say)
    else:
        say(f"{PROG}: 3/4 the race: nothing to race (" + ("not data-bound" if not data_bound else
            f"no candidate is predicted faster than the current setting by more than {opts.margin:.0%}") + ")")
    table = answer.candidate_table(order, ceilings, predicted, race)
    faster = race.faster() if race is not None else []
    pick = faster[0] if faster else None
    png = Path(tempfile.mkdtemp(prefix="wif-advise-")) / "epoch_split.png"
    shown = [now] + ([m for n in ["current"] + raced for m in race.runs.get(n, [])[:1]] if race else []) \
        + ([fixed] if fixed is not None else [])
    pic = answer.picture(shown, bound_s, source, png)
    out = Advice(data_bound, sentence, pick, None, None, None, "", table, runner.parent_id, 0, 0.0,
                 str(pic) if pic else None, {n: p.epoch_s for n, p in predicted.items()},
                 {n: race.measured_s(n) for n in ["current"] + raced} if race else {})
    if pick is not None:
        r = race.table.loc[pick]
        out.speedup = (float(r["speedup"]), float(r["speedup_ci_low"]), float(r["speedup_ci_high"]))
        out.train_line = answer.train_line(overrides, made[pick])
        out.dataloader = answer.dataloader_kwargs(made[pick], base.loader.pin_memory)
        out.why = answer.memory_cost(race, pick)
    else:
        out.why = answer.why_keep(race, raced, predicted, data_bound, not cuda, opts.margin)
    return out




def report(a: Advice, say: Callable[[str], None] = print) -> None:
    """The answer as the command prints it."""
    say(f"{PROG}: 4/4 the answer")
    say(a.table)
    if a.pick:
        low, high = a.speedup[1], a.speedup[2]
        say(f"Pick: {a.pick}, {a.speedup[0]:.2f}x faster than the current setting (95% interval {low:.2f}-{high:.2f}); "
            f"memory: {a.why}.")
        say(f"Use it: {a.train_line}")
        say(f"In your script: {a.dataloader}")
    else:
        say(f"Keep what you have: {a.why}")
    if a.picture:
        say(f"Picture: {a.picture} (also an artifact of the parent run)")
    say(f"{a.runs} runs in {a.seconds:.0f} s, nested under MLflow run {a.parent_run_id} (tag wif.kind=advise).")


def advise_overrides(overrides: Sequence[str] = (), config_dir: Optional[Path] = None, quiet: bool = False,
                     **options: object) -> Advice:
    """`wif.advise(...)`: the command from a script or notebook; a bad override raises ConfigError before
    anything runs. `options` are Options' fields (epochs, race_candidates, max_blocks, ...)."""
    opts = Options(**options)  # an unknown option is a TypeError naming it
    check(opts)
    base = load_config(list(overrides), config_dir)
    check_tunable(base)
    preload()
    silence_worker_count_warning()
    say = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    result = advise(base, list(overrides), opts, say)
    report(result, say)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(PROG, "Find where an epoch's time goes, predict which loader setting helps, race the best "
                          "against the configured one, and print the pick or why to keep the current setting.")
    d = Options()
    for name, kind, text in (("epochs", int, "epochs of each measuring run, the first left out"),
                             ("batches", int, "batches an epoch of each loader-only trial, at most"),
                             ("race-candidates", int, "best predicted candidates raced"),
                             ("min-blocks", int, "race: the first look after this many blocks"),
                             ("max-blocks", int, "race: at most this many blocks"),
                             ("max-epochs", int, "race: trainer.epochs=auto up to this many epochs a run"),
                             ("margin", float, "race: tie margin; a candidate is raced if predicted this much faster"),
                             ("bound-margin", float, "within this share of the bound: not data-bound")):
        p.add_argument(f"--{name}", type=kind, default=getattr(d, name.replace("-", "_")),
                       help=f"{text} (default: %(default)s)")
    return p


def check(opts: Options) -> None:
    """Refuse options that cannot run, as a bad override is refused."""
    for key in ("epochs", "batches", "race_candidates", "max_epochs"):
        if getattr(opts, key) < 1:
            raise ConfigError(f"--{key.replace('_', '-')}={getattr(opts, key)} must be at least 1.")
    if opts.epochs < 2:
        raise ConfigError("--epochs must be at least 2: the first epoch is left out.")
    problems = RaceRules(opts.min_blocks, opts.max_blocks, opts.margin).problems()
    if problems:
        raise ConfigError(problems[0].replace("race.", "--").replace("_", "-"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    setup_logging(PROG)
    args = build_parser().parse_intermixed_args(argv)
    opts = Options(**{k: v for k, v in vars(args).items() if k in Options.__dataclass_fields__})
    try:
        check(opts)
        base = load_config(args.overrides, args.config_dir)
        check_tunable(base)
        resolve_device(base.device)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    preload()
    silence_worker_count_warning()  # the search goes to twice the cores on purpose (note 001)
    try:
        result = advise(base, args.overrides, opts, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the runs so far are in MLflow (tag wif.kind=advise).", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RuntimeError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_FAILED
    report(result)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
