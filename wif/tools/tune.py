"""`wif-tune`: the num_workers that feeds batches fastest, for each pin_memory (docs/tuning.md, "Loader tuner").

The search is `worker_search.search_workers`. Each trial is a loader-only run of the configured loader,
`trainer.max_batches` batches an epoch. It has the study's loop, its forked and sampled child
(`wif.run.supervise.supervise`) and its MLflow store. The runs are tagged `wif.kind=tune`, so the study's
report never mixes them in. The pick is the fewest workers within `--min-gain` of the fastest. More workers
for no gain only cost CPU and RAM.

    wif-tune preset=smoke data.fraction=0.4 --batches 50
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from wif.config import Config, ConfigError, DataSource, TransferKind, warnings_for
from wif.config.compose import STUDY_COMMAND, load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, quick_exit
from wif.data.folder_check import require_readable
from wif.data.loaders import silence_worker_count_warning
from wif.measure import names
from wif.measure.nvml import resolve_device
from wif.measure.sysinfo import usable_cores
from wif.measure.tracking import check_server_answers
from wif.run.forking import preload
from wif.tools.tune_trials import WORKER_ONLY, Trial, Tuner, trial_config
from wif.tools.worker_search import best_trial, search_workers

PROG = "wif-tune"


def table(trials: Sequence[Trial], best: Optional[Trial], no_ram: str = "no PSS read during the trial") -> str:
    """The trials, one row each; a RAM figure not measured shows '-', and a last line says why: `no_ram`."""
    rows = [
        f"{'pin_memory':<11}{'num_workers':>12}{'img/s':>10}{'epoch s':>9}{'1st batch s':>12}"
        f"{'data wait':>10}{'RAM PSS MB':>11}  phase"
    ]
    missing = False
    for t in sorted(trials, key=lambda t: (t.pin_memory, t.num_workers)):
        s = t.summary
        if t.img_s is None:
            rows.append(f"{str(t.pin_memory):<11}{t.num_workers:>12}  {t.status}: {t.error}")
            continue
        mark = "  <- best" if t is best else ""
        pss = s.get(names.RAM_PEAK_PSS_MB)
        missing = missing or pss is None or math.isnan(pss)
        rows.append(
            f"{str(t.pin_memory):<11}{t.num_workers:>12}{t.img_s:>10.0f}{s[names.EPOCH_TIME_MEAN_S]:>9.3f}"
            f"{s[names.FIRST_BATCH_MEAN_S]:>12.3f}{s[names.DATA_WAIT_SHARE_MEAN]:>10.0%}"
            + (f"{'-':>11}" if pss is None or math.isnan(pss) else f"{pss:>11.0f}")
            + f"  {t.phase}{mark}"
        )
    if missing:
        rows.append(f"RAM PSS MB '-': not measured ({no_ram}).")
    return "\n".join(rows)


def train_command(base: Config, overrides: Sequence[str], best: Trial) -> str:
    """The `wif-study` line that uses the best setting, keeping the user's other overrides."""
    mine = {"loader.num_workers", "loader.pin_memory"} | (
        {f"loader.{k}" for k, _ in WORKER_ONLY} if best.num_workers == 0 else set()
    )
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in mine | {"loader"}]
    line = [
        f"loader={base.loader.name}",
        f"loader.num_workers={best.num_workers}",
        f"loader.pin_memory={str(best.pin_memory).lower()}",
    ]
    if best.num_workers == 0:  # the option's worker-only keys would be refused without workers
        line += [
            f"loader.{key}={'null' if neutral is None else str(neutral).lower()}"
            for key, neutral in WORKER_ONLY
            if hasattr(base.loader, key) and getattr(base.loader, key) != neutral
        ]
    return " ".join([STUDY_COMMAND] + line + kept)


def build_parser() -> argparse.ArgumentParser:
    """wif-tune's flags beside the study's overrides."""
    p = tool_parser(
        PROG,
        "Search loader.num_workers for both pin_memory values with "
        "loader-only runs of the configured loader; print the best and its wif-study line.",
    )
    for flag, kind, default, text in (
        ("--batches", int, 50, "batches timed per epoch"),
        ("--epochs", int, 3, "epochs per trial; the first (worker start-up, warm-up) is left out"),
        ("--step", int, 4, "coarse step in workers"),
        ("--radius", int, 3, "refine this many workers around the best"),
        ("--min-gain", float, 0.05, "more workers must be this much faster to count as helping"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")
    p.add_argument("--max-workers", type=int, help="most workers tried (default: twice the usable cores)")
    p.add_argument(
        "--pin-memory",
        choices=["both", "true", "false"],
        default="both",
        help="pin_memory values searched (default: both; without CUDA only false)",
    )
    return p


def _check(args: argparse.Namespace, conf: Config) -> None:
    """ConfigError for a flag out of range, or a configuration with no loader to tune."""
    for key in ("batches", "epochs", "step"):
        if getattr(args, key) < 1:
            raise ConfigError(f"--{key}={getattr(args, key)} must be at least 1.")
    if args.radius < 0 or args.min_gain < 0 or (args.max_workers is not None and args.max_workers < 0):
        raise ConfigError("--radius, --min-gain and --max-workers cannot be negative.")
    check_tunable(conf)


def check_tunable(conf: Config) -> None:
    """Refuse a configuration with no streaming loader to tune, or an unusable image folder, before any trial."""
    if conf.data.source is DataSource.fixed:
        raise ConfigError(
            "data=fixed has no loader to tune: its batches are already on the device. Pick the data "
            "option you train on (e.g. data=synthetic)."
        )
    if conf.transfer.kind is TransferKind.resident:
        raise ConfigError(
            f"loader={conf.loader.name} keeps the dataset on the device and uses no workers; pick a "
            "loader option that streams batches (e.g. loader=pin_nb)."
        )
    if conf.loader.background:
        raise ConfigError(
            f"loader={conf.loader.name} uses BackgroundGenerator, which deadlocks with workers; pick a "
            "loader option without it (e.g. loader=pin_nb)."
        )
    if conf.data.source is DataSource.folder and conf.data.path is None:
        require_readable(conf.data)


def searched_config(overrides: Sequence[str], config_dir: Optional[Path] = None) -> Config:
    """The configuration the search starts from; a worker-only key the user sets is checked beside workers."""
    said = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if said & {f"loader.{key}" for key, _ in WORKER_ONLY}:
        return load_config([*overrides, "loader.num_workers=1"], config_dir)
    return load_config(overrides, config_dir)


class Plan(NamedTuple):
    """What the search tries: worker counts up to `max_workers`, for each pinning in `pins`."""

    cores: int
    max_workers: int
    pins: List[bool]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """wif-tune: the inputs checked, each pinning searched, the trials and the pick said."""
    quick_exit()
    setup_logging(PROG)
    args = build_parser().parse_intermixed_args(argv)
    try:
        base, device = _inputs(args)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    plan = _plan(args, base, device)
    print(
        f"{PROG}: loader={base.loader.name}, fraction {base.data.fraction:g}, batch {base.data.batch_size}, "
        f"up to {args.batches} batches x {args.epochs} epochs per trial (first epoch left out), on {device}, "
        f"{plan.cores} usable cores: num_workers 0..{plan.max_workers}",
        flush=True,
    )
    preload()
    silence_worker_count_warning()  # the search goes to twice the cores on purpose (docs/tuning.md)
    tuner = Tuner(base, device, args)
    try:
        best_per_pin = _search(tuner, plan, args)
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; the trials so far are in MLflow (tag wif.tune_id={tuner.tune_id}).", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    return _report(tuner, best_per_pin, base, args)


def _inputs(args: argparse.Namespace) -> Tuple[Config, str]:
    """The searched configuration and its device; ConfigError, a bad mix of settings included, before any run."""
    base = searched_config(args.overrides, args.config_dir)
    _check(args, base)
    check_server_answers(base.tracking.uri)
    device = resolve_device(base.device)
    trial_config(base, num_workers=0, pin_memory=False, batches=args.batches, epochs=args.epochs)  # a bad mix
    return base, device


def _plan(args: argparse.Namespace, base: Config, device: str) -> Plan:
    """The worker counts and pinnings searched; what the machine rules out is said on stderr."""
    cuda = device == "cuda"
    for message in warnings_for(base, cuda):
        if "pin_memory" not in message:  # pinning is what is searched
            print(f"{PROG}: {message}", file=sys.stderr)
    cores = usable_cores()
    max_workers = 2 * cores if args.max_workers is None else args.max_workers
    if max_workers > 2 * cores:  # a loader that sleeps on I/O keeps scaling past the cores
        print(f"{PROG}: --max-workers={max_workers} is more than twice the {cores} usable cores.", file=sys.stderr)
    pins = {"both": [False, True], "true": [True], "false": [False]}[args.pin_memory]
    if not cuda and True in pins:
        print(
            f"{PROG}: no CUDA device: pin_memory has no effect, so only pin_memory=false is searched.", file=sys.stderr
        )
        pins = [False]
    return Plan(cores=cores, max_workers=max_workers, pins=pins)


def _search(tuner: Tuner, plan: Plan, args: argparse.Namespace) -> Dict[bool, Optional[int]]:
    """Each pinning's best worker count, None where its every trial failed."""
    return {
        pin: search_workers(
            functools.partial(tuner.run, pin),
            max_workers=plan.max_workers,
            step=args.step,
            radius=args.radius,
            min_gain=args.min_gain,
        )
        for pin in plan.pins
    }


def _report(tuner: Tuner, best_per_pin: Dict[bool, Optional[int]], base: Config, args: argparse.Namespace) -> int:
    """The trials' table, the pick tagged in MLflow and its wif-study line; the exit code.

    Args:
        tuner: the trials run and their store.
        best_per_pin: each pinning's best worker count, None where its every trial failed.
        base: the searched configuration.
        args: the flags and overrides.
    """
    best = best_trial(tuner.trials, best_per_pin, args.min_gain)
    if best is None:
        print(table(tuner.trials, None))
        print(
            f"{PROG}: every trial failed; see the errors above and the runs tagged wif.tune_id={tuner.tune_id}.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    tuner.tracker.set_tags(best.run_id, {"wif.tune_best": "true"})
    print()
    print(table(tuner.trials, best))
    print()
    for p, bw in best_per_pin.items():
        print(f"Best with pin_memory={str(p).lower()}: num_workers={bw}")
    print(
        f"Best: num_workers={best.num_workers} with pin_memory={str(best.pin_memory).lower()} "
        f"({best.img_s:.0f} img/s). {len(tuner.trials)} trials logged to MLflow with tag wif.tune_id={tuner.tune_id}."
    )
    print(f"Use it: {train_command(base, args.overrides, best)}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
