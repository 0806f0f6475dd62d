"""How a loader is watched (`WatchOptions`), and where the watch's lines go."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional


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
    print(f"wif.watch: {text}", file=sys.stderr, flush=True)
