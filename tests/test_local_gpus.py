"""One job per GPU on one machine: hydra/launcher=local_gpus plans its jobs by the visible GPUs, a GPU is never
claimed twice, and a real sweep runs each job in its own process on its own GPU."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from tests.conftest import ROOT, run_train, train_runs
from tests.launchers import SMOKE, compose_hydra
from wif.sweep.cluster import (
    check_gpu_parallelism,
    plan_local_gpus,
)
from wif.sweep.gpus import ClusterError, claim_gpu, release_gpu

CLUSTER_TAGS = {"wif.node", "wif.launcher", "wif.node_jobs"}


pytestmark = pytest.mark.usefixtures("own_locks")


def test_local_gpus_composes() -> None:
    cfg = compose_hydra("hydra/launcher=local_gpus", "hydra.launcher.timeout_min=90")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.wif_launcher.launchers.LocalLauncher"
    assert (launcher.tasks_per_node, launcher.timeout_min, launcher.gpus_per_node) == (1, 90, None)
    assert cfg.hydra.callbacks.wif_cluster.pin_gpus is True


# ----------------------------------------------------------------------------- one job per GPU
def test_local_gpus_runs_one_job_per_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cfg = compose_hydra("hydra/launcher=local_gpus")
    assert plan_local_gpus(cfg) == 2
    assert (cfg.hydra.launcher.gpus_per_node, cfg.hydra.sweeper.max_batch_size) == (2, 2)
    assert "setup" not in cfg.hydra.launcher  # submitit's 0,1 are already these GPUs


def test_local_gpus_hands_the_jobs_the_gpus_this_shell_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5")
    cfg = compose_hydra("hydra/launcher=local_gpus", "hydra.launcher.gpus_per_node=2")
    assert plan_local_gpus(cfg) == 2 and cfg.hydra.sweeper.max_batch_size == 2
    assert list(cfg.hydra.launcher.setup) == ["export CUDA_VISIBLE_DEVICES=2,3"]


@pytest.mark.parametrize(
    "cvd,overrides,named",
    [
        ("0,1", ("hydra.launcher.gpus_per_node=3",), "shows 2 GPU(s)"),
        ("0,1", ("hydra.sweeper.max_batch_size=3",), "3 jobs at once on 2 GPU(s)"),
        ("", (), "no GPU"),
    ],
)
def test_local_gpus_refuses_more_jobs_than_gpus(
    monkeypatch: pytest.MonkeyPatch, cvd: str, overrides: tuple, named: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    with pytest.raises(ClusterError, match=re.escape(named)):
        plan_local_gpus(compose_hydra("hydra/launcher=local_gpus", *overrides))


def test_local_gpus_refuses_gpus_that_other_jobs_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = _holder(tmp_path, "1")
    try:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        with pytest.raises(ClusterError, match=f"GPU 1: pid {holder.pid} "):
            plan_local_gpus(compose_hydra("hydra/launcher=local_gpus"))
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_refused_sweep_starts_no_job(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "hydra/launcher=local_gpus",
        "hydra.launcher.gpus_per_node=3",
        "loader=baseline,pin",
        *SMOKE,
        timeout=120,
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert proc.returncode == 2
    assert "Refused: hydra.launcher.gpus_per_node=3, but this machine shows 2 GPU(s)" in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("multirun/*/*/.submitit")) and not train_runs(store)


def test_check_gpu_parallelism() -> None:
    check_gpu_parallelism(1, 1)
    check_gpu_parallelism(2, 4)
    check_gpu_parallelism(8, None)  # GPUs not countable here: the scheduler decides
    for parallel, gpus in ((2, 1), (None, 4), (1, 0)):
        with pytest.raises(ClusterError, match="GPU"):
            check_gpu_parallelism(parallel, gpus)


HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from wif.sweep.gpus import claim_gpu
print(claim_gpu(sys.argv[1].split(",")).token, flush=True)
time.sleep(60)
"""


def _holder(tmp_path: Path, gpus: str) -> subprocess.Popen:
    """Another job's process holding a GPU (a real process, a real lock)."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(root=str(ROOT)))
    proc = subprocess.Popen(
        [sys.executable, str(script), gpus],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": gpus},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip(), "the holder claimed nothing"
    return proc


def test_a_gpu_is_never_claimed_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    first = _holder(tmp_path, "0")
    try:
        claim = claim_gpu(["0", "1"])  # GPU 0 is taken: this job gets 1
        assert os.environ["CUDA_VISIBLE_DEVICES"] == claim.token  # pinned before any run is forked
        assert claim.token == "1" or claim.token.startswith(("GPU-", "MIG-"))  # NVML names it by UUID
        assert claim_gpu(["0", "1"]) is claim  # a process keeps its GPU for all its jobs
        release_gpu()
        second = _holder(tmp_path, "1")
        try:
            with pytest.raises(ClusterError) as refused:
                claim_gpu(["0", "1"])
            assert f"pid {first.pid} " in str(refused.value) and f"pid {second.pid} " in str(refused.value)
        finally:
            second.kill()
            second.wait()
    finally:
        release_gpu()
        first.kill()
        first.wait()
    assert claim_gpu(["0", "1"]).token  # the locks end with their processes, however they end
    release_gpu()


# ----------------------------------------------------------------------------- a real sweep
def _runs_by_pos(store: str) -> Dict[int, Any]:
    return {int(r.data.tags["wif.sweep_pos"]): r for r in train_runs(store)}


@pytest.mark.slow
def test_local_gpus_sweep_runs_each_job_in_its_own_process_one_per_gpu(
    tmp_path: Path, store: str, cache_dir: Path, own_locks: Path
) -> None:
    """Three CPU jobs on two 'GPUs' (CUDA_VISIBLE_DEVICES=0,1 on a machine without CUDA: device=cpu)
    through submitit's local executor: batches of two, each job claiming its own GPU."""
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "hydra/launcher=local_gpus",
        "loader=baseline,pin,bg",
        "device=cpu",
        "trainer.epochs=2",  # a warm-up and one measured epoch: the claims are about processes and GPUs
        *SMOKE,
        timeout=300,
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "local_gpus: 2 job(s) at a time, one per GPU" in out
    assert "Sweep done: 3 finished, 0 failed" in out  # read from the store: the jobs ran in other processes
    runs = _runs_by_pos(store)
    assert sorted(runs) == [0, 1, 2] and {r.info.status for r in runs.values()} == {"FINISHED"}

    # Each job its own submitit process, each claiming one GPU: 0 and 1 for the first batch, 0 again after.
    job_dirs = [d for d in tmp_path.glob("multirun/*/*/.submitit/*") if d.name.isdigit()]
    assert len(job_dirs) == 3
    logs = "".join(p.read_text() for d in job_dirs for p in d.glob("*_log.*"))
    claims = sorted(
        line.split("CUDA_VISIBLE_DEVICES=")[1].rstrip(")")
        for line in logs.splitlines()
        if "claimed for this job" in line
    )
    assert claims == ["0", "0", "1"], logs[-3000:]
    assert sorted(p.name for p in own_locks.iterdir()) == ["0.lock", "1.lock"]

    # The second batch starts only when the first has ended: never more jobs than GPUs at once.
    first_batch_end = max(runs[0].info.end_time, runs[1].info.end_time)
    assert runs[2].info.start_time >= first_batch_end

    tags = [r.data.tags for r in runs.values()]
    assert all(CLUSTER_TAGS <= t.keys() for t in tags)
    assert {t["wif.launcher"] for t in tags} == {"local_gpus"}
    assert {t["wif.node"] for t in tags} == {socket.gethostname()}
    assert len({t["wif.submitit_job_id"] for t in tags}) == 3
    assert {t["wif.cuda_visible_devices"] for t in tags} <= {"0", "1"}
    assert runs[0].data.tags["wif.cuda_visible_devices"] != runs[1].data.tags["wif.cuda_visible_devices"]
    assert all(int(t["wif.node_jobs"]) >= 1 for t in tags)
