"""A process that forks runs stays off torch's CPU thread pool, so a run forked after it computed never hangs.

GNU OpenMP (torch's intra-op threads) is not fork-safe: a child forked after its parent ran a parallel op waits
forever, at its own first parallel op, for pool threads that exist only in the parent. wif-advise did so at
data.fraction=0.4 (its parent drew the subset, a randperm of 50,000, then its first run hung in data generation)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The advice's order: the supervising process is readied (preload), computes on torch (a parallel randperm, as
# the advice's data line does), then forks a real run whose data generation and step are parallel ops.
SCRIPT = """
import sys, torch
from wif.config.compose import load_config
from wif.measure.tracking import Tracker
from wif.run.forking import preload
from wif.tools.tune_trials import run_recorded

default = torch.get_num_threads()
conf = load_config(["preset=smoke", "device=cpu", "trainer.epochs=2", "data.num_train=600", "data.num_test=100",
                    f"data.cache_dir={sys.argv[1]}", f"tracking.uri={sys.argv[2]}"])
preload()
torch.randperm(1_000_000)
parent = torch.get_num_threads()
tracker = Tracker(conf.tracking.uri, conf.tracking.experiment)
run_id, outcome, error = run_recorded(tracker, conf, "cpu", "forked", {"wif.kind": "test"}, "forked")
threads = tracker.client.get_run(run_id).data.tags.get("wif.torch_threads")
print("default", default, "parent", parent, "run", threads, "status", outcome.status, error, flush=True)
"""


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.skipif(usable_cores() < 2, reason="one usable core: torch starts no thread pool, nothing can hang")
def test_a_run_forked_after_its_parent_computed_runs_on_the_parents_threads(tmp_path: Path, store: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "cache"), store],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )  # about 15 s alone here; a hung run never ends
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the forked run hung: {hung.stdout!r} {hung.stderr!r}"[-2000:])
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.split()
    default, parent, run = int(line[1]), int(line[3]), int(line[5])
    assert line[7] == "FINISHED", done.stdout
    assert default >= 2 and parent == 1 and run == default, done.stdout
