"""Many writers at once: N=2 jobs side by side on this machine (`hydra/launcher=local_gpus` on two 'GPUs' of a
CPU machine, each job its own submitit process) writing to one MLflow server that is restarted mid-sweep. Every
run is accounted for: one FINISHED run per job, none lost, duplicated or left RUNNING, no 'database is locked'.
Two is the least that writes at once, and each job pays seconds of imports on CI's two cores.
Two sweeps writing one SQLite store at once: tests/test_failures.py (`test_concurrent_writers_lose_nothing`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List

import pytest
from mlflow.entities import Run

from tests.conftest import ROOT, run_train, start_train, train_runs
from tests.servers import MlflowServer, server  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_locks")]
N = 2
LOADERS = "loader=baseline,bg"  # N jobs
SIDE_BY_SIDE = ("hydra/launcher=local_gpus", "device=cpu", "preset=smoke", "repeat=0")
# Runs whose items wait 15 ms: about 1 s an epoch on any machine, so the N runs are RUNNING at once (on a fast
# machine, smoke's 8 epochs of computing ended before the second job had started its run)
SLEEPY = ("data=custom", "data._target_=tests.user_factories.sleepy_squares", "+data.kwargs.delay_ms=15")
GPUS = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(N))}  # N at once: one per 'GPU'


def job_logs(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in tmp_path.glob("multirun/*/*/.submitit/*/*_log.*"))


def tally(out: str) -> str:
    return next((line.split("] ", 1)[-1] for line in out.splitlines() if "Sweep done:" in line), "no tally")


def one_finished_run_per_job(runs: List[Run]) -> None:
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert sorted(r.data.tags["wif.loader"] for r in finished) == ["baseline", "bg"], [
        (r.info.run_name, r.info.status) for r in runs
    ]
    assert len({r.data.tags["wif.config_hash"] for r in finished}) == N  # no duplicate
    assert not [r for r in runs if r.info.status == "RUNNING"]
    for run in finished:  # whole: every epoch's metrics, the summary, its config
        assert {"epoch_time_mean_s", "test_acc"} <= run.data.metrics.keys()


def test_jobs_at_once_write_one_server_restarted_mid_sweep(
    tmp_path: Path,
    cache_dir: Path,
    server: MlflowServer,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server goes down while the N runs are RUNNING and comes back on its port and store. MLflow's
    client retries what it could not send; a run that failed on it all the same says so, and the same command
    again completes it (resume): in the end one FINISHED run per job, and none RUNNING."""
    sweep = (*SIDE_BY_SIDE, *SLEEPY, LOADERS, "trainer.epochs=6", f"tracking.uri={server.uri}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPUS["CUDA_VISIBLE_DEVICES"])
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # tests.user_factories in the jobs' own processes
    proc = start_train(tmp_path, server.uri, cache_dir, *sweep)
    try:
        deadline = time.monotonic() + 240
        while len(train_runs(server.uri, status="RUNNING")) < N:
            assert proc.poll() is None and time.monotonic() < deadline, "the N runs never ran at once"
            time.sleep(0.5)
        down = time.time()
        server.stop()
        time.sleep(3)  # down while the runs log their epochs
        up = server.start() and time.time()
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    runs = train_runs(server.uri)
    print(f"server restarted mid-sweep: exit {proc.returncode}; {tally(out)}")
    print("runs:", sorted((r.data.tags["wif.loader"], r.info.status) for r in runs))
    if proc.returncode != 0:  # a run that could not reach the server for long enough: failed, and said so
        failed = [r for r in runs if r.info.status != "FINISHED"]
        assert failed and "Sweep done:" in out, out[-3000:]
        again = run_train(tmp_path, server.uri, cache_dir, *sweep, timeout=400, env=GPUS)
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        runs = train_runs(server.uri)
    one_finished_run_per_job(runs)
    # the outage fell inside each of the first sweep's N runs: begun before it, ended after it
    assert len([r for r in runs if r.info.start_time < down * 1000 and r.info.end_time > up * 1000]) == N
    assert "database is locked" not in job_logs(tmp_path) + out
