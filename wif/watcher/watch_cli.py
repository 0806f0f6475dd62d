"""`wif-watch -- python train.py ARGS...`: the watch's figures for a script with no line changed.

For a loop inside a framework, such as Lightning's `Trainer.fit`, the HF `Trainer` or accelerate, or any
script one would rather not edit. The command runs as it is, with wif.watcher.hook's folder on PYTHONPATH.
Its training loader's epochs are timed, said and logged as `wif.watch` does. That loader is the first
DataLoader iterated with gradients enabled that takes a step, or `--loader NAME`. WIF_WATCH=print says them
and logs nothing.
The command replaces this process (`exec`): its exit code, its signals and its terminal are its own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Optional, Sequence

from wif.watcher.hook import BOOT
from wif.watcher.origin import NAMED

PROG = "wif-watch"


def build_parser() -> argparse.ArgumentParser:
    """The command line: `--loader`, then the command after `--`."""
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [--loader NAME] -- COMMAND [ARGS...]",
        description="Time each epoch of your script's training loader and say whether it waited for data, with "
        "no line of the script changed (Lightning, the HF Trainer, accelerate, your own loop).",
    )
    p.add_argument("--loader", metavar="NAME", help="the training loader by its dataset's class or file:line")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command with the hook on PYTHONPATH, in place of this process; 2 for a bad command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    opts = build_parser().parse_args(args[:cut])
    command = args[cut + 1 :]
    if not command:
        print(f"{PROG}: nothing after `--`: give the command that trains: {PROG} -- python train.py", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:
        print(f"{PROG}: {command[0]}: no such program", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([BOOT, *filter(None, [env.get("PYTHONPATH")])])
    if opts.loader:
        env[NAMED] = opts.loader
    os.execvpe(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
