"""A run that shares the machine is told apart: real train.py runs, alone and beside CPU-bound processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_train, train_runs
from wif.measure.contention import machine_busy_s, tree_cpu_s

pytestmark = pytest.mark.slow

# Epochs of about a second on this machine: long enough for /proc/stat's 10 ms ticks to resolve a share.
RUN = ("preset=smoke", "loader=baseline", "data.num_train=4000", "data.fraction=1.0", "trainer.epochs=3")
# Beside CPU-bound processes the same run's epochs take three times as long: half the images and one measured
# epoch still give /proc/stat's ticks a second and more to resolve others' share.
BESIDE = ("preset=smoke", "loader=baseline", "data.num_train=2000", "data.fraction=1.0", "trainer.epochs=2")


def others_cpu_pct(seconds: float = 3.0) -> float:
    """Percent of a core other processes use now: the machine's busy time (/proc/stat, as the runs' meter
    reads it) less this process's own, over `seconds` of this process sleeping."""
    me = psutil.Process()
    busy, own, t = machine_busy_s(), me.cpu_times(), time.monotonic()
    time.sleep(seconds)
    busy2, own2, t2 = machine_busy_s(), me.cpu_times(), time.monotonic()
    if busy is None or busy2 is None:
        pytest.skip("no /proc/stat: the machine's CPU use cannot be read")
    ours = (own2.user + own2.system) - (own.user + own.system)
    return max(100.0 * ((busy2 - busy) - ours) / (t2 - t), 0.0)


QUIET_PCT = 25  # measure.contended_pct's default: above it, a run is rightly tagged contended


@pytest.mark.alone
def test_a_run_beside_cpu_bound_processes_is_tagged_contended_and_alone_it_is_not(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        beside = run_train(tmp_path, store, cache_dir, *BESIDE, "repeat=1", multirun=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert beside.returncode == 0, beside.stderr[-3000:]
    shared = {r.data.tags["wif.repeat"]: r for r in train_runs(store, status="FINISHED")}["1"]
    assert shared.data.tags["wif.contended"] == "true"
    assert shared.data.metrics["host_other_cpu_pct"] > 50
    out = beside.stdout + beside.stderr
    assert "CONTENDED: other processes used" in out and "tagged wif.contended=true" in out

    # Alone: only where the machine is quiet, or the run would rightly be contended. Measured first, and
    # again if the run says it was contended (others may have started meanwhile).
    before = others_cpu_pct()
    if before > QUIET_PCT:
        pytest.skip(f"the 'alone' half needs a quiet machine: others use {before:.0f}% of a core")
    alone = run_train(tmp_path, store, cache_dir, *RUN, "repeat=0", multirun=False)
    assert alone.returncode == 0, alone.stderr[-3000:]
    quiet = {r.data.tags["wif.repeat"]: r for r in train_runs(store, status="FINISHED")}["0"]
    print(
        f"\nothers' CPU: alone {quiet.data.metrics['host_other_cpu_pct']:.0f}% (the machine before: "
        f"{before:.0f}%), beside {len(hogs)} busy loops {shared.data.metrics['host_other_cpu_pct']:.0f}% of a core"
    )
    if quiet.data.tags["wif.contended"] == "true" and (after := others_cpu_pct()) > QUIET_PCT:
        pytest.skip(f"others started using the CPU during the 'alone' run ({after:.0f}% of a core after it)")
    assert quiet.data.tags["wif.contended"] == "false"
    assert quiet.data.metrics["host_other_cpu_pct"] < 25
    assert "CONTENDED" not in alone.stdout + alone.stderr


# A forkserver's workers are its children, not the run's: when they end, their CPU time lands in the
# forkserver's children times. Here a child (the forkserver's place) forks a grandchild that burns CPU.
FORKSERVER_LIKE = """
import os, time
if os.fork() == 0:  # the forkserver
    worker = os.fork()
    if worker == 0:  # its worker: ~0.5 s of CPU, then gone
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass
        os._exit(0)
    os.waitpid(worker, 0)
    print("reaped", flush=True)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_workers_reaped_by_a_descendant_count_as_the_runs_own() -> None:
    root = subprocess.Popen([sys.executable, "-c", FORKSERVER_LIKE], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "reaped"
        assert tree_cpu_s(psutil.Process(root.pid)) >= 0.45  # not counted as another process's
    finally:
        for child in psutil.Process(root.pid).children(recursive=True):
            child.kill()
        root.kill()
        root.wait()


@pytest.mark.alone
def test_each_epoch_logs_the_cpu_seconds_of_the_run_and_its_workers(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """Items that compute for 2 ms (768 a training pass, 64 a validation: 1.66 core-seconds an epoch, in 2
    workers) against items that sleep as long: tree_cpu_s counts the workers' CPU, and not their waits."""
    common = (
        "preset=smoke",
        "data=custom",
        "data._target_=wif.advisor.examples.slow_reads",
        "data.fraction=0.1",
        "+data.kwargs.delay_ms=2",
        "loader=pin_nb_w4_pf2",
        "loader.num_workers=2",
        "trainer.epochs=2",
        "progress=false",
    )
    proc = run_train(tmp_path, store, cache_dir, *common, "+data.kwargs.burn=true,false")  # one sweep, two runs
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    per_epoch = {
        r.data.params["data.kwargs.burn"]: [m.value for m in client.get_metric_history(r.info.run_id, "tree_cpu_s")]
        for r in train_runs(store, status="FINISHED")
    }
    burning, sleeping = per_epoch["True"], per_epoch["False"]
    print(f"\ntree_cpu_s per epoch: items computing {burning}, items sleeping {sleeping}")
    assert len(burning) == len(sleeping) == 2
    assert all(cpu >= 1.66 for cpu in burning), burning  # the items' own thread time, in workers that ended
    # Upper bounds need a quiet machine: beside other processes the step's own CPU time grows (its threads
    # spin while they wait for a core), by more than the items' 1.66 s. The runs' own meter says, each
    # epoch, whether others were there (host_other_cpu_pct; above 25% of a core a run is tagged contended).
    others = max(
        m.value
        for r in train_runs(store, status="FINISHED")
        for m in client.get_metric_history(r.info.run_id, "host_other_cpu_pct")
    )
    if others > 25:
        pytest.skip(
            f"the upper bounds need a quiet machine: others used up to {others:.0f}% of a core in an "
            "epoch of these runs"
        )
    # Each worker's CPU is counted once: twice would pass the sleeping run's by 3.32 s. The step's own CPU grows
    # too where 2 burning workers share 2 cores with it (CI: 3.7 s against 1.24 s sleeping), so no tighter bound.
    assert all(cpu < min(sleeping) + 2 * 1.66 for cpu in burning), (burning, sleeping)
    assert all(cpu < burning[1] - 1.2 for cpu in sleeping), (sleeping, burning)
