"""`wif-advise`: why is my training slow, and what should I change. The same overrides as train.py.

    wif-advise preset=smoke data=custom data._target_=wif.advisor.examples.slow_reads
    wif-advise -- python my_train.py ARGS...      (your own script, under wif.watch: wif.advisor.script)

The command line, its refusals and its output; the steps are wif.advisor.steps'. A refusal is one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from wif.advisor.advice import PROG, Advice, Options
from wif.config import Config, ConfigError
from wif.config.compose import load_config, setup_logging, tool_parser
from wif.config.exits import EXIT_BAD_SETTING, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, quick_exit
from wif.decide.race import RaceRules
from wif.measure.lifetime import process_age_s
from wif.measure.nvml import resolve_device
from wif.watcher.origin import NAMED

if TYPE_CHECKING:
    from wif.advisor.mode import Mode

PYTHONS = ("python", "python3", os.path.basename(sys.executable))

# NOTE [ A refusal imports no torch ]
# A command refused (a bad option, a missing script, nothing after `--`, a bad override) answers in one line.
# torch, MLflow and statsmodels cost seconds of imports: this module imports them in the functions that advise
# (the steps, the modes, wif-tune's checks), after every check that needs none. A refusal took 8 CPU-s, now
# under one.


def report(a: Advice, say: Callable[[str], None] = print) -> None:
    """The answer as the command prints it."""
    say(f"{PROG}: 4/4 the answer")
    say(a.table)
    if a.pick:
        low, high = a.speedup[1], a.speedup[2]
        say(
            f"Pick: {a.pick}, {a.speedup[0]:.2f}x faster than the current setting (95% interval {low:.2f}-{high:.2f}); "
            f"memory: {a.why}."
        )
        if a.outside:
            say(a.outside)
        say(f"Use it: {a.train_line}")
        say(f"In your script: {a.dataloader}")
    else:
        say(f"Keep what you have: {a.why}")
    if a.assumes:
        say(a.assumes)
    say(a.contention)
    if a.picture:
        say(f"Picture: {a.picture} (also an artifact of the parent run)")
    say(f"{a.runs} runs in {a.seconds:.0f} s, nested under MLflow run {a.parent_run_id} (tag wif.kind=advise).")


def advise_overrides(
    overrides: Sequence[str] = (), config_dir: Optional[Path] = None, quiet: bool = False, **options: object
) -> Advice:
    """`wif.advise(...)`: the command from a script or notebook; a bad override raises ConfigError first.

    Args:
        overrides: train.py's overrides.
        config_dir: the user's own config folder.
        quiet: say nothing while it runs.
        options: Options' fields: epochs, race_candidates, max_blocks, ...
    """
    from wif.advisor.steps import advise  # torch and MLflow: see NOTE [ A refusal imports no torch ]
    from wif.data.loaders import silence_worker_count_warning
    from wif.run.forking import parent_threads_back, preload
    from wif.tools.tune import check_tunable

    opts = Options(**options)  # an unknown option is a TypeError naming it
    check(opts)
    base = load_config(list(overrides), config_dir)
    check_tunable(base)
    preload()
    silence_worker_count_warning()
    say = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    try:
        result = advise(base, list(overrides), opts, say=say)
    finally:
        parent_threads_back()
    report(result, say)
    return result


def build_parser() -> argparse.ArgumentParser:
    """wif-advise's options, with train.py's overrides."""
    p = tool_parser(
        PROG,
        "Find where an epoch's time goes, predict which loader setting helps, race the best "
        "against the configured one, and print the pick or why to keep the current setting.",
    )
    d = Options()
    for name, kind, text in (
        ("epochs", int, "epochs of each measuring run, the first left out"),
        ("batches", int, "batches an epoch of each loader-only trial, at most"),
        ("race-candidates", int, "best predicted candidates raced"),
        ("min-blocks", int, "race: the first look after this many blocks"),
        ("max-blocks", int, "race: at most this many blocks"),
        ("max-epochs", int, "race: at most this many epochs a run"),
        ("margin", float, "race: tie margin; a candidate is raced if predicted this much faster"),
        ("bound-margin", float, "within this share of the bound: not data-bound"),
        (
            "minutes",
            float,
            "the whole advice within about this many minutes: the race takes what the measuring steps leave",
        ),
    ):
        p.add_argument(
            f"--{name}", type=kind, default=getattr(d, name.replace("-", "_")), help=f"{text} (default: %(default)s)"
        )
    p.add_argument(
        "--max-workers",
        type=int,
        metavar="N",
        help="the most DataLoader workers the search tries (default: twice the cores this process may use)",
    )
    p.add_argument(
        "--loader",
        metavar="NAME",
        help="with `-- COMMAND`: the training loader, by its dataset's class or where it is made (file:line), "
        "where it is not the first DataLoader iterated with gradients enabled",
    )
    return p


def check(opts: Options) -> None:
    """Refuse options that cannot run, as a bad override is refused."""
    for key in ("epochs", "batches", "race_candidates", "max_epochs"):
        if getattr(opts, key) < 1:
            raise ConfigError(f"--{key.replace('_', '-')}={getattr(opts, key)} must be at least 1.")
    if opts.epochs < 2:
        raise ConfigError("--epochs must be at least 2: the first epoch is left out.")
    if opts.max_workers is not None and opts.max_workers < 0:
        raise ConfigError(f"--max-workers={opts.max_workers} cannot be negative.")
    if not opts.minutes > 0:
        raise ConfigError(f"--minutes={opts.minutes} must be a positive number of minutes.")
    problems = RaceRules(opts.min_blocks, opts.max_blocks, opts.margin).problems()
    if problems:
        raise ConfigError(problems[0].replace("race.", "--").replace("_", "-"))


def process_started() -> float:
    """This process's start on time.monotonic()'s clock: --minutes counts the start-up as the user's clock does."""
    return time.monotonic() - process_age_s()


class _Once:
    """The first Ctrl-C, SIGTERM or SIGHUP raises KeyboardInterrupt; the rest are ignored."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.raised:
            self.raised = True
            raise KeyboardInterrupt


def _hear_interrupts(once: _Once) -> None:
    """`kill` ends the advice as Ctrl-C does, every run KILLED; the signals after it change nothing."""
    signal.signal(signal.SIGTERM, once)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # SIGINT left ignored where it was (nohup)
        signal.signal(signal.SIGINT, once)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # a closed terminal: the command, in a session of its
        signal.signal(signal.SIGHUP, once)  # own (wif.advisor.script.command), no longer hears the hangup


def split(argv: Sequence[str]) -> Tuple[List[str], Optional[List[str]]]:
    """(wif-advise's own arguments, the command after `--`, or None without one)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def check_command(command: Sequence[str]) -> None:
    """A command that cannot start is refused before anything runs."""
    if not command:
        raise ConfigError(
            "nothing after `--`: give the command that trains, e.g. `wif-advise -- python my_train.py ARGS`"
        )
    if shutil.which(command[0]) is None and not os.path.isfile(command[0]):
        raise ConfigError(f"{command[0]}: no such program")
    script = command[1] if len(command) > 1 and os.path.basename(command[0]) in PYTHONS else None
    if script is not None and not script.startswith("-") and not os.path.isfile(script):
        raise ConfigError(f"{script}: no such script (from {Path.cwd()})")


def choose_mode(args: argparse.Namespace, command: Optional[Sequence[str]]) -> Tuple[Mode, Config]:
    """The mode and its configuration: train.py's harness, or the command after `--`, checked and probed here."""
    if command is None:
        base = load_config(args.overrides, args.config_dir)
        from wif.advisor.mode import Harness  # torch: past the overrides' check

        return Harness(), base
    check_command(command)
    from wif.advisor.script.mode import prepare  # torch and MLflow: past the command's check

    mine = prepare(args.overrides, command, args.config_dir)
    return mine, mine.base


def checked(args: argparse.Namespace, command: Optional[Sequence[str]], opts: Options) -> Tuple[Mode, Config]:
    """The options, the command and the configuration checked, the command probed; ConfigError where one cannot run."""
    check(opts)
    if args.loader is not None:
        if command is None:
            raise ConfigError("--loader names a loader of your command: give it after `--`")
        os.environ[NAMED] = args.loader  # the script's runs inherit it (wif.watcher.watch)
    mode, base = choose_mode(args, command)
    from wif.tools.tune import check_tunable  # MLflow: past the refusals that need none

    check_tunable(base)
    resolve_device(base.device)
    return mode, base


def main(argv: Optional[Sequence[str]] = None) -> int:
    """wif-advise: its exit code."""
    quick_exit()
    started = process_started()
    setup_logging(PROG)
    argv, command = split(sys.argv[1:] if argv is None else argv)  # `-- python my_train.py ...`: a script
    args = build_parser().parse_intermixed_args(argv)
    opts = Options(**{k: v for k, v in vars(args).items() if k in Options.__dataclass_fields__}, started=started)
    try:
        mode, base = checked(args, command, opts)
        from wif.advisor.steps import advise  # the statistics: imported before a Ctrl-C is the advice's to end
        from wif.data.loaders import silence_worker_count_warning
        from wif.run.forking import preload
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_SETTING
    except KeyboardInterrupt:  # Ctrl-C while the command is probed: it ended its own way, and nothing was recorded
        print(f"{PROG}: interrupted before any run was recorded.", file=sys.stderr)
        return EXIT_INTERRUPTED
    _hear_interrupts(_Once())
    try:
        preload()
        silence_worker_count_warning()  # the search goes to twice the cores on purpose (docs/tuning.md, wif-tune)
        say = lambda line: print(line, flush=True)  # noqa: E731
        result = advise(base, args.overrides, opts, say=say, mode=mode)
    except KeyboardInterrupt:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # its runs are ended: Ctrl-C again changes nothing
            signal.signal(sig, signal.SIG_IGN)
        print(f"{PROG}: interrupted; its runs are ended KILLED in MLflow (tag wif.kind=advise).", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, RuntimeError) as err:  # ConfigError: the user's command failed under wif.watch
        said = err if isinstance(err, ConfigError) else mode.failure(err)
        print(f"{PROG}: {said}", file=sys.stderr)
        return EXIT_BAD_SETTING if isinstance(said, ConfigError) else EXIT_FAILED
    report(result)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
