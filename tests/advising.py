"""What the tests of `wif-advise -- COMMAND` share (tests/test_advise_script.py, tests/test_advise_script_ends.py, ...):
the command run for real in a subprocess on a real SQLite store, and the advice's runs read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import new_store

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = (
    "import sys, time, torch, wif\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)\n"
    "for epoch in range(int(sys.argv[1])):\n    for (x,) in wif.watch(loader):\n"
    "        time.sleep(float(sys.argv[2]))\n"
)  # argv: its epochs of 4 batches, each batch's step in seconds


def advise_env(store: str, **more: str) -> Dict[str, str]:
    """wif-advise's environment: this tree's wif, the store, no orders inherited from a watch around the tests."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **more}
    env.pop("WIF_WATCH_ORDERS", None)
    return env


def advise(
    tmp_path: Path, store: str, *argv: str, timeout: float = 900, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """`wif-advise ARGV` run in `tmp_path` into `store`, awaited; `env` adds to advise_env's."""
    return subprocess.run(
        [sys.executable, "-m", "wif.advisor.advise_cli", *argv],
        cwd=tmp_path,
        env=advise_env(store, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runs(store: str) -> List:
    """The advice's runs in `store`: the parent and the nested ones."""
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'advise'")


def in_a_folder(
    tmp_path_factory: pytest.TempPathFactory, source: str, name: str, *args: str, options: Sequence[str] = (), **kw: Any
) -> Callable[[], Tuple[subprocess.CompletedProcess, str]]:
    """A command of its own (a folder, a store, `source` written as `name` unless empty) that advises `name ARGS`
    with wif-advise's `options`: (what it did, its store)."""
    work = tmp_path_factory.mktemp("advise")
    store = new_store(work)
    if source:
        (work / name).write_text(source)
    return lambda: (advise(work, store, *options, "--", sys.executable, name, *args, **kw), store)
