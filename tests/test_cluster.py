"""Beyond one GPU: the launchers compose, jobs are told apart by node and GPU, and a sweep logs to (and resumes
from, and is reported from) a real MLflow tracking server. One job per GPU on one machine: tests/test_local_gpus."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, run_train, train_runs
from tests.launchers import SMOKE, compose_hydra, sbatch_script
from tests.servers import MlflowServer
from wif.sweep.cluster import (
    cluster_tags,
    is_job_command,
    job_processes,
    node_jobs,
)

pytestmark = pytest.mark.usefixtures("own_locks")  # a sweep here never takes a real job's GPU lock


# ----------------------------------------------------------------------------- launcher configs
SLURM_USER = (
    "hydra/launcher=slurm",
    "hydra.launcher.partition=gpu",
    "hydra.launcher.account=proj42",
    "hydra.launcher.timeout_min=600",
    "hydra.launcher.cpus_per_task=12",
    "hydra.launcher.mem_gb=48",
    "hydra.launcher.array_parallelism=8",
    "hydra.launcher.constraint=a100",
    "hydra.launcher.setup=[module load cuda]",
    "tracking.uri=http://mlflow.example:5000",
)


def test_slurm_launcher_composes_with_what_a_user_sets() -> None:
    cfg = compose_hydra(*SLURM_USER)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.wif_launcher.launchers.SlurmLauncher"
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == (1, 1, 1)  # one GPU per job
    assert (launcher.partition, launcher.account, launcher.constraint) == ("gpu", "proj42", "a100")
    assert (launcher.timeout_min, launcher.cpus_per_task, launcher.mem_gb) == (600, 12, 48)
    assert launcher.array_parallelism == 8 and list(launcher.setup) == ["module load cuda"]
    assert cfg.hydra.callbacks.wif_cluster._target_ == "wif.sweep.cluster.ClusterCallback"
    assert cfg.hydra.callbacks.sweep._target_ == "wif.sweep.callback.SweepCallback"  # the study's own stays
    script = sbatch_script(launcher, jobs=33)
    for line in (
        "--gpus-per-node=1",
        "--ntasks-per-node=1",
        "--cpus-per-task=12",
        "--mem=48GB",
        "--time=600",
        "--partition=gpu",
        "--account=proj42",
        "--constraint=a100",
        "--array=0-32%8",
        "module load cuda",
    ):
        assert line in script, line


def test_slurm_defaults_suit_a_100_epoch_googlenet_run() -> None:
    launcher = compose_hydra("hydra/launcher=slurm").hydra.launcher
    assert launcher.gpus_per_node == 1 and launcher.cpus_per_task >= 9  # 8 DataLoader workers + the run
    assert launcher.timeout_min >= 120 and launcher.mem_gb >= 16 and launcher.max_num_timeout == 0
    assert "--array=0-329%16" in sbatch_script(launcher, jobs=330)


@pytest.mark.slow
def test_cfg_hydra_prints_the_slurm_launcher(tmp_path: Path) -> None:
    """The user's check before submitting (Hydra 1.3 takes --cfg without -m and without sweep values)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *SLURM_USER, "--cfg", "hydra", "-p", "hydra.launcher"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = yaml.safe_load(proc.stdout)
    assert printed["_target_"].endswith("SlurmLauncher")
    assert (printed["gpus_per_node"], printed["partition"], printed["timeout_min"]) == (1, "gpu", 600)


def test_the_default_stays_the_basic_launcher() -> None:
    cfg = compose_hydra()
    assert cfg.hydra.launcher._target_ == "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
    assert cfg.hydra.sweeper.max_batch_size is None and "wif_cluster" not in cfg.hydra.callbacks


# ----------------------------------------------------------------------------- what a job records
def test_cluster_tags_name_the_node_the_slurm_job_and_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    for env, value in {
        "SLURMD_NODENAME": "gpu-node-07",
        "SLURM_JOB_ID": "4242",
        "SLURM_ARRAY_JOB_ID": "4200",
        "SLURM_ARRAY_TASK_ID": "42",
        "CUDA_VISIBLE_DEVICES": "3",
    }.items():
        monkeypatch.setenv(env, value)
    tags = cluster_tags()
    assert {
        k: tags[k]
        for k in (
            "wif.node",
            "wif.slurm_job_id",
            "wif.slurm_array_job_id",
            "wif.slurm_array_task_id",
            "wif.cuda_visible_devices",
        )
    } == {
        "wif.node": "gpu-node-07",
        "wif.slurm_job_id": "4242",
        "wif.slurm_array_job_id": "4200",
        "wif.slurm_array_task_id": "42",
        "wif.cuda_visible_devices": "3",
    }
    assert int(tags["wif.node_jobs"]) >= 1 and tags["wif.launcher"] == "none"
    assert all(k.startswith("wif.") and isinstance(v, str) for k, v in tags.items())


def test_cluster_tags_outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(env, raising=False)
    tags = cluster_tags()
    assert tags["wif.node"] == socket.gethostname()
    assert not {"wif.slurm_job_id", "wif.cuda_visible_devices"} & tags.keys()


@pytest.mark.parametrize(
    "cmdline,is_job",
    [
        (["python", "/x/train.py", "-m", "loader=pin"], True),
        (["/venv/bin/python3", "-u", "train.py"], True),
        (["python", "-u", "-m", "submitit.core._submit", "/sweep/.submitit/%j"], True),
        (["python", "train.py", "-m", "hydra/launcher=slurm"], False),  # only submits and waits
        (["python", "train.py", "-m", "hydra/launcher=local_gpus"], False),
        (["python", "train.py", "-m", "hydra/launcher=slurm_ddp"], False),
        (["python", "train.py", "-m", "hydra/launcher=basic"], True),
        (["/venv/bin/python3", "/venv/bin/wif-study", "-m", "loader=pin"], True),  # the console script
        (["python", "-m", "wif.sweep.study", "-m", "hydra/launcher=slurm"], False),
        (["python", "-m", "submitit.local._local", "/sweep"], False),  # submitit's controller, not a job
        (["srun", "--unbuffered", "python", "-u", "-m", "submitit.core._submit", "/f"], False),  # its python is
        (["vim", "train.py"], False),
        (["python", "other.py"], False),
        ([], False),
    ],
)
def test_what_counts_as_a_job(cmdline: List[str], is_job: bool) -> None:
    assert is_job_command(cmdline) is is_job


FAKE_JOB = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def test_a_job_counts_once_not_once_per_process(tmp_path: Path) -> None:
    """A job's forked run (and its workers) carry its command line; it is one job all the same."""
    script = tmp_path / "train.py"
    script.write_text(FAKE_JOB)
    job = subprocess.Popen([sys.executable, str(script), "-m", "loader=pin"], stdout=subprocess.PIPE, text=True)
    submitter = subprocess.Popen(
        [sys.executable, str(script), "-m", "hydra/launcher=slurm"], stdout=subprocess.PIPE, text=True
    )
    forked: List[int] = []
    try:
        for proc in (job, submitter):
            assert proc.stdout is not None
            forked.append(int(proc.stdout.readline()))
        jobs = job_processes()
        assert job.pid in jobs and forked[0] not in jobs
        assert submitter.pid not in jobs and forked[1] not in jobs
        assert node_jobs() >= 2  # the fake job and this test
    finally:
        for pid in forked:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in (job, submitter):
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- real sweeps


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """A real tracking server (tests/servers.py), stopped however the tests end."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield {"uri": server.start().uri, "root": server.root}
    finally:
        server.stop()


@pytest.mark.slow
def test_a_sweep_logs_to_a_tracking_server_resumes_from_it_and_is_reported_from_it(
    tmp_path: Path, cache_dir: Path, mlflow_server: Dict[str, Any]
) -> None:
    uri, server_root = mlflow_server["uri"], mlflow_server["root"]
    sweep = ("loader=baseline,pin", f"tracking.uri={uri}", *SMOKE)
    proc = run_train(tmp_path, uri, cache_dir, *sweep, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

    client = MlflowClient(uri)
    runs = train_runs(uri, status="FINISHED")
    assert sorted(r.data.tags["wif.loader"] for r in runs) == ["baseline", "pin"]
    for run in runs:
        assert {"epoch_time_mean_s", "throughput_mean_img_s", "test_acc", "ram_peak_pss_mb"} <= run.data.metrics.keys()
        history = client.get_metric_history(run.info.run_id, "epoch_time_s")
        assert sorted(h.step for h in history) == [0, 1, 2]
        assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
        local = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
        config = yaml.safe_load(Path(local).read_text())
        assert config["loader"]["name"] == run.data.tags["wif.loader"]
    # Everything went over HTTP into the server's own stores; nothing was written beside the sweep.
    assert len(list((server_root / "artifacts").rglob("config.yaml"))) == 2
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()

    again = run_train(tmp_path, uri, cache_dir, *sweep, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "2 skipped" in again.stdout + again.stderr
    assert len(train_runs(uri)) == 2

    from wif.report.report_cli import main as report_main  # in this process: a subprocess costs its imports

    assert report_main(["--tracking-uri", uri, "--out", str(tmp_path / "report"), "--keep-contended"]) == 0
    assert (tmp_path / "report" / "summary.md").read_text().strip()
