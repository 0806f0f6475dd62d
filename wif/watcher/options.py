"""How a loader is watched (`WatchOptions`), what the watch says of a window, and where its lines go."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, Optional

from wif.measure import names


@dataclass(frozen=True)
class WatchOptions:
    """How a loader is watched: what `wif.watch` was asked and what the environment says.

    Args:
        experiment: the MLflow experiment; None for MLFLOW_EXPERIMENT_NAME or the study's.
        run_name: the MLflow run's name; None for "watch SCRIPT".
        log: whether the epochs go to MLflow.
        quiet: whether each epoch's line is left unsaid.
        ordered: under wif-advise's orders (WIF_WATCH_ORDERS).
        claims: one loader among all hooked ones is watched, the training loader.
    """

    experiment: Optional[str] = None
    run_name: Optional[str] = None
    log: bool = True
    quiet: bool = False
    ordered: bool = False
    claims: bool = False


def silent(text: str) -> None:
    """Says nothing: a quiet watch, or a rank other than 0."""


def to_stderr(text: str) -> None:
    """Says `text` on stderr, at once."""
    print(text, file=sys.stderr, flush=True)


def warn(text: str) -> None:
    """The watch's own trouble: one line on stderr, never a traceback in the user's training."""
    to_stderr(f"wif.watch: {text}")


WAITED = 0.05  # a step that waits for data more than this share of the epoch is held back by the loader
RAM_SEEN = ((names.RAM_PEAK_PSS_MB, "PSS"), (names.RAM_PEAK_RSS_MB, "RSS"))  # the line's RAM peak: PSS where read


def line(e: Dict[str, float], complete: bool = True) -> str:
    """The window's one line: its time and whether the step waited for data."""
    share = e["data_wait_share"]
    epoch = int(e.get(names.SCRIPT_EPOCH, e["epoch"])) + 1
    span = f"window {int(e['epoch']) + 1} (epoch {epoch})" if e.get(names.WINDOWED) else f"epoch {epoch}"
    head = (
        f"wif.watch: {span}: {e[names.EPOCH_TIME_S]:.3f} s, {int(e['batches'])} batches, "
        f"{e[names.THROUGHPUT_IMG_S]:,.0f} samples/s, first batch {e[names.FIRST_BATCH_S]:.3f} s"
    )
    if not complete:
        head += " (ended early)"
    if share > WAITED:
        wait = e[names.DATA_WAIT_S]
        verdict = f"waited for data {wait:.3f} s ({share:.0%} of the epoch): the loader holds the step back"
    else:
        verdict = f"did not wait for data ({share:.0%} of the epoch in next())"
    ram = next(((e[k], label) for k, label in RAM_SEEN if k in e), None)
    if ram is not None:
        verdict += f"; RAM peak {ram[0]:,.0f} MB ({ram[1]}, the process and {int(e.get('workers_peak', 0))} workers)"
    return f"{head}; {verdict}"
