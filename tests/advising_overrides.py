"""What the tests of `wif-advise KEY=VALUE...` (wif's own harness, no script) share (tests/test_advise.py,
tests/test_advise_folder.py): the command run into a store of tmp_path, and SLOW_READS, a data-bound workload."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, new_store

SLOW_READS = [
    "preset=smoke",
    "data=custom",
    "data._target_=wif.advisor.examples.slow_reads",
    "data.fraction=0.05",
    "+data.kwargs.delay_ms=3",
]


def advise_overrides(
    tmp_path: Path, *args: str, timeout: float = 300, refused: bool = False
) -> subprocess.CompletedProcess:
    """wif-advise into tmp_path's store: a new empty one, or (`refused`) a path where a refusal must leave none."""
    env = {**os.environ, "WIF_CACHE_DIR": str(tmp_path / "cache")}
    store = f"sqlite:///{tmp_path / 'mlflow.db'}" if refused else new_store(tmp_path)
    return subprocess.run(
        [sys.executable, "-m", "wif.advisor.advise_cli", *args, f"tracking.uri={store}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
