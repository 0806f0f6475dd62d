"""Beyond one GPU: the launchers compose, jobs are told apart by node and GPU, two timed runs never share
a GPU, and a sweep logs to (and resumes from, and is reported from) a real MLflow tracking server."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from tests.conftest import CONF, ROOT, run_train, train_runs
from tests.servers import MlflowServer
from wif.sweep.cluster import (
    check_gpu_parallelism,
    cluster_tags,
    is_job_command,
    job_processes,
    node_jobs,
    plan_local_gpus,
)
from wif.sweep.gpus import ClusterError, claim_gpu, release_gpu

CLUSTER_TAGS = {"wif.node", "wif.launcher", "wif.node_jobs"}
SMOKE = ("preset=smoke", "repeat=0")


@pytest.fixture(autouse=True)
def own_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GPU locks of this test's own, apart from those of real jobs on this machine (and its sweeps)."""
    monkeypatch.setenv("WIF_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def compose_hydra(*overrides: str) -> DictConfig:
    """The configuration a multirun would launch with, hydra node included."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


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


def sbatch_script(launcher: DictConfig, jobs: int) -> str:
    """The sbatch file submitit would write for this launcher config: the launcher's own translation
    (generic keys -> SLURM's names, others as they are), rendered by submitit's own writer."""
    from submitit.slurm.slurm import SlurmExecutor, _convert_mem, _make_sbatch_string

    params = OmegaConf.to_container(launcher, resolve=False)
    for key in ("_target_", "submitit_folder", "max_num_timeout"):
        params.pop(key)
    eq = SlurmExecutor._equivalence_dict()
    params = {eq.get(k, k): v for k, v in params.items() if v is not None}
    params["mem"] = _convert_mem(params["mem"])
    params["job_name"] = "train"
    return _make_sbatch_string(
        command="python -u -m submitit.core._submit /sweep", folder="/sweep/%j", map_count=jobs, **params
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
