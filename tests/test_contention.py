"""A run that shares the machine is told apart: real train.py runs, alone and beside CPU-bound processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_train, train_runs

pytestmark = pytest.mark.slow

# Epochs of about a second on this machine: long enough for /proc/stat's 10 ms ticks to resolve a share.
RUN = ("preset=smoke", "loader=baseline", "data.num_train=4000", "data.fraction=1.0", "trainer.epochs=3")


def test_a_run_beside_cpu_bound_processes_is_tagged_contended_and_alone_it_is_not(
        tmp_path: Path, store: str, cache_dir: Path) -> None:
    alone = run_train(tmp_path, store, cache_dir, *RUN, "repeat=0", multirun=False)
    assert alone.returncode == 0, alone.stderr[-3000:]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        beside = run_train(tmp_path, store, cache_dir, *RUN, "repeat=1", multirun=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert beside.returncode == 0, beside.stderr[-3000:]
    runs = {r.data.tags["wif.repeat"]: r for r in train_runs(store, status="FINISHED")}
    quiet, shared = runs["0"], runs["1"]
    print(f"\nothers' CPU: alone {quiet.data.metrics['host_other_cpu_pct']:.0f}%, beside "
          f"{len(hogs)} busy loops {shared.data.metrics['host_other_cpu_pct']:.0f}% of a core")
    assert quiet.data.tags["wif.contended"] == "false"
    assert quiet.data.metrics["host_other_cpu_pct"] < 25
    assert shared.data.tags["wif.contended"] == "true"
    assert shared.data.metrics["host_other_cpu_pct"] > 50
    out = beside.stdout + beside.stderr
    assert "CONTENDED: other processes used" in out and "tagged wif.contended=true" in out
    assert "CONTENDED" not in alone.stdout + alone.stderr
