"""`wif`: the list of wif's commands and the question each answers, in one screen.

Each command has its own `--help`; this one only says which to reach for. It imports nothing heavy.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

# The console scripts of pyproject.toml, in the order a user meets them (tests/test_package.py checks both
# name the same commands).
COMMANDS = (
    ("wif-study", "which loader/transfer settings train fastest: runs the study, one run or a sweep"),
    ("wif-plan", "what a sweep will cost before it starts: the fixed grid against race + auto"),
    ("wif-report", "who is faster, per data fraction: tables, plots and verdicts from the runs"),
    ("wif-advise", "why is my training slow and what to change: the fix raced against my setting"),
    ("wif-watch", "did my training wait for data: each epoch timed, no line of my script changed"),
    ("wif-tune", "how many workers feed my loader fastest, with and without pin_memory"),
    ("wif-batch-size", "the largest batch my model trains with inside a VRAM budget"),
    ("wif-bandwidth", "how fast this machine copies host to GPU and back, pinned and pageable"),
    ("wif-pack", "pack an image folder into LMDB or tar shards to train from (data.format)"),
)

USAGE = """usage: wif-COMMAND [KEY=VALUE ...] [--config-dir MYCONF] [--help]

Who is Faster: which PyTorch data-loading and host-to-GPU transfer settings train fastest, and
what each costs in VRAM and RAM. Runs land in ./mlflow.db of the folder you start in (else in
$MLFLOW_TRACKING_URI when set).

commands:
{rows}

Each has its own --help. Those taking KEY=VALUE overrides take wif-study's, and --config-dir MYCONF
adds your own YAML (MYCONF/loader/mine.yaml: loader=mine). Start with:
  wif-study preset=smoke                           # one small run, a minute on a CPU
  wif-study -m 'loader=glob(*)' preset=smoke repeat=0 data.fraction=0.1
  wif-report --out report/                         # the answer, in report/summary.md
"""


def usage() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    return USAGE.format(rows="\n".join(f"  {name:<{width}}  {what}" for name, what in COMMANDS))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`wif`, `wif --help`: the list, exit 0; anything else: the list on stderr, exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] not in ("-h", "--help", "help"):
        print(f"wif: no command {args[0]!r}: the commands are wif-NAME, one program each\n", file=sys.stderr)
        print(usage(), file=sys.stderr, end="")
        return 2
    print(usage(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
