"""A run never outlives its sweep: killed with SIGKILL, the supervisor takes its run and workers with it,
and the next sweep closes the run record it left RUNNING and runs the job again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import run_train, start_train, train_runs
from tests.processes import sigkill_and_expect_gone, wait_for_workers

pytestmark = pytest.mark.slow

JOB = (
    "preset=smoke",
    "loader=pin_nb",
    "loader.num_workers=2",
    "loader.persistent_workers=true",
    "data.fraction=0.25",  # 400 training images: long enough to be killed running, short to run again
    "trainer.epochs=4",
)


def test_a_killed_supervisor_takes_its_run_along_and_the_next_sweep_reruns_the_job(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    proc = start_train(tmp_path, store, cache_dir, *JOB)
    run_process = wait_for_workers(proc, 2)
    deadline = time.monotonic() + 120  # on a loaded machine the run's process has children before its run is logged
    while not train_runs(store) and time.monotonic() < deadline:
        time.sleep(0.2)
    tree = [run_process, *run_process.children()]
    sigkill_and_expect_gone(proc, tree)
    (stale,) = train_runs(store)
    assert stale.info.status == "RUNNING" and stale.data.tags["wif.pid"] == str(proc.pid)

    again = run_train(tmp_path, store, cache_dir, *JOB)  # the same command
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    runs = {r.info.run_id: r for r in train_runs(store)}
    assert runs[stale.info.run_id].info.status == "KILLED"
    assert "Orphaned" in runs[stale.info.run_id].data.tags["wif.error"]
    assert sorted(r.info.status for r in runs.values()) == ["FINISHED", "KILLED"]


def test_nodes_procs_workers_end_with_a_killed_supervisor(tmp_path: Path, store: str, cache_dir: Path) -> None:
    """torchdata.nodes starts its worker processes itself (no worker_init_fn): they die with the run all the same."""
    proc = start_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "engine=nodes_procs",
        "loader=pin_nb_w4_pf2",
        "loader.num_workers=2",
        "data.fraction=1.0",
        "trainer.epochs=4",
    )
    run_process = wait_for_workers(proc, 2)
    tree = [run_process, *run_process.children()]
    assert len(tree) >= 3
    sigkill_and_expect_gone(proc, tree)
