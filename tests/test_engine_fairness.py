"""Engines compared like for like (issue 28): the model computes on as many threads under every engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, run_train, train_runs


def train_on_two_threads(tmp_path: Path, store: str, cache_dir: Path, *overrides: str) -> None:
    """A smoke run of pin_nb_w4_pf2 at fraction 0.2 where torch's default is 2 threads."""
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "loader=pin_nb_w4_pf2",
        "data.fraction=0.2",
        *overrides,
        env={"OMP_NUM_THREADS": "2"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def threads_of(store: str, run) -> tuple:
    """The run's starting torch thread count (tag) and each epoch's compute_threads, in epoch order."""
    history = MlflowClient(store).get_metric_history(run.info.run_id, "compute_threads")
    return run.data.tags["wif.torch_threads"], [h.value for h in sorted(history, key=lambda h: h.step)]


@pytest.mark.slow
def test_nodes_threads_runs_the_model_with_the_configured_thread_count(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """torchdata's thread workers set torch's thread count to 1; the model's epochs still use the configured 2."""
    train_on_two_threads(tmp_path, store, cache_dir, "engine=nodes_threads", "loader.num_workers=2")
    (run,) = train_runs(store)
    assert run.info.status == "FINISHED" and threads_of(store, run) == ("2", [2.0, 2.0, 2.0])


@pytest.mark.slow
def test_trainer_threads_sets_the_models_threads_and_names_the_cell(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """trainer.threads=1 beside one worker (on a CPU the step then leaves the worker a core: docs/advise.md)."""
    train_on_two_threads(tmp_path, store, cache_dir, "loader.num_workers=1", "trainer.threads=1,null")
    runs = {r.data.tags["wif.cell"]: r for r in train_runs(store, status="FINISHED")}
    assert set(runs) == {"pin_nb_w4_pf2+threads1@0.2", "pin_nb_w4_pf2@0.2"}, set(runs)
    for cell, threads, param in (("pin_nb_w4_pf2+threads1@0.2", 1, "1"), ("pin_nb_w4_pf2@0.2", 2, "None")):
        tag, per_epoch = threads_of(store, runs[cell])
        assert tag == str(threads) and set(per_epoch) == {float(threads)} and len(per_epoch) == 3
        assert runs[cell].data.params["trainer.threads"] == param


FRESH_PROCESS = """
import numpy as np, torch
from omegaconf import OmegaConf
from tests.conftest import compose_cfg
from wif.data.datasets import Split
from wif.data.engines import build_engine_batches
from wif.data.loaders import Reading
conf = OmegaConf.to_object(compose_cfg("engine=nodes_threads", "loader=pin_nb_w4_pf2", "loader.num_workers=2"))
# from numpy: nothing here has used torch's thread pool before the engine's workers start
split = Split(torch.from_numpy(np.ones((256, 3, 8, 8), np.float32)), torch.from_numpy(np.zeros(256, np.int64)))
batches = build_engine_batches(split, conf.loader, conf.engine, Reading(batch_size=64, train=True, seed=0))
for epoch in range(2):
    assert sum(len(y) for _, y in batches) == 256
print(torch.get_num_threads())
"""


def test_nodes_threads_workers_leave_the_loop_threads_count_alone() -> None:
    """The case where torchdata's `set_num_threads(1)` lands: a loop thread that has not computed before the
    first epoch's workers start would take up their count of 1 (it does without the engine's fix)."""
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "2"
