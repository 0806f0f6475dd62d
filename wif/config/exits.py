"""How a job's end reaches the user: exit codes, one line on the terminal, the traceback in the job's log.

The full traceback goes only where someone looking for it reads it: the job's log file, the run's `error.txt`.

Exit codes of `train.py` (README, "Exit codes"):
    `0`: the run FINISHED, or was skipped (resume).
    `1`: the run FAILED, or a job of a multirun failed.
    `2`: a bad setting, found before any run was created.
    `130`: the run was interrupted (Ctrl-C, SIGTERM) and is KILLED, as shells report it.
"""

from __future__ import annotations

import atexit
import functools
import gc
import logging
import os
import re
import sys
from typing import Callable, Optional, Tuple

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_SETTING = 2
EXIT_INTERRUPTED = 130

# torch.utils.data re-raises a worker's exception in the main process as "Caught <Type> in DataLoader
# worker process <n>.\nOriginal Traceback (most recent call last): ..." (torch/_utils.py ExceptionWrapper).
_WORKER = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)\.\nOriginal (.*)", re.S)
_TRACEBACK_HEAD = "Traceback (most recent call last):\n"


@functools.lru_cache(maxsize=None)
def quick_exit() -> None:
    """End the command's process without Python's last garbage collection; every exit handler still runs.

    The objects torch, MLflow and SQLAlchemy leave, about 570,000, took over a second to walk, with nothing to free.
    """
    atexit.register(gc.freeze)


def worker_error(err: BaseException) -> Optional[Tuple[str, str]]:
    """(type name, one-line message) of the exception a DataLoader worker raised, or None when `err` was
    not raised in a worker. The message is the original one; the worker's traceback is left out."""
    found = _WORKER.match(str(err))
    if found is None:
        return None
    name, worker, original = found.groups()
    last = original.rsplit(_TRACEBACK_HEAD, 1)[-1]  # a chained exception lists its causes first
    lines = [line for line in last.splitlines() if line and not line.startswith(" ")]
    text = lines[0] if lines else name  # the first line not indented under a frame: "pkg.Type: message"
    head, sep, rest = text.partition(": ")
    message = " ".join((rest if sep and head.rsplit(".", 1)[-1] == name else text).split())
    return name, f"{message} (raised in DataLoader worker {worker})"


def describe(err: BaseException, num_workers: int) -> Tuple[str, str]:
    """A run's error as (type name, one-line message), with the likely cause where a worker's would mislead."""
    in_worker = worker_error(err)
    if in_worker is not None:
        return in_worker
    if isinstance(err, (ConnectionError, EOFError)) and num_workers > 0:
        return type(err).__name__, (
            f"{err} (a DataLoader worker process died while handing over a batch: killed, or out of memory?)"
        )
    return type(err).__name__, str(err)


def to_log_file(text: str, logger: logging.Logger) -> None:
    """Write `text`, a traceback, to the log files (Hydra's `<job>.log`), not to the terminal."""
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, text, None, None)
    seen = set()
    source: Optional[logging.Logger] = logger
    while source is not None:
        for handler in source.handlers:
            if isinstance(handler, logging.FileHandler) and id(handler) not in seen:
                seen.add(id(handler))
                handler.handle(record)
        source = source.parent if source.propagate else None


def one_line(err: BaseException) -> str:
    """A Hydra or OmegaConf error as one line; an unknown key names the keys its group has."""
    from wif.config.targets import unknown_key_message

    cause = err.__cause__ if err.__cause__ is not None else err
    full_key = getattr(cause, "full_key", None)
    if full_key and "not in" in str(cause):
        return unknown_key_message(str(full_key))
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if len(lines) > 1 and lines[1].startswith("Available options"):  # an option that does not exist
        options = lines[2 : lines.index("Config search path:")] if "Config search path:" in lines else lines[2:]
        return f"{lines[0]}; options: {', '.join(options)}."
    if len(lines) == 1 and cause is not err and str(cause).strip():  # "Error merging override k=v": its cause says why
        return f"{lines[0]}: {str(cause).strip().splitlines()[0]}"
    return " ".join(lines[:2]) or type(err).__name__


def main_with_bad_settings(main: Callable[[], object]) -> None:
    """Run a `@hydra.main` function; what Hydra refuses while composing becomes one line and exit 2, as wif's checks.

    An interrupt before a run opened (a tracking server being retried, say) is one line and exit 130.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    full = "HYDRA_FULL_ERROR" in os.environ
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # let the exception reach us instead of Hydra's printer
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        if full:
            raise
        print(f"Bad setting: {one_line(err)}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_SETTING) from None
    except KeyboardInterrupt:  # before a run opened, as the store is reached: a run in progress ends KILLED itself
        print("Interrupted; run the same command again to resume.", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
