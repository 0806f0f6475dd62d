"""SLURM for real: scripts/slurm_local.sh's one-node cluster (munge, slurmctld, slurmd, slurmdbd from Debian's
packages), the real train.py submitting through `hydra/launcher=slurm` and `slurm_ddp`, a real MLflow server.
Skipped in one line where the cluster cannot be started (the packages absent, not root); CI installs them."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, run_train, start_train, train_runs
from tests.servers import MlflowServer, server  # noqa: F401 - the fixture
from wif.config.exits import EXIT_FAILED

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
# CPU jobs on a 2-core node: no GPU, one core and 1 GB each, so that two jobs run side by side
ON_THE_NODE = (
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=10",
)
SMOKE = ("preset=smoke", "device=cpu", "repeat=0", "data.fraction=0.1")


def _free_ports(n: int) -> int:
    """A base port with the n ports from it free (slurmctld, slurmd, slurmdbd), beside a cluster already up."""
    for base in range(23817, 30000, 10):
        try:
            for port in list(range(base, base + n)) + [base + 1000]:  # mariadb's
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise AssertionError("no free ports for the local cluster")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, str]]:
    """The one-node cluster, in a state directory and on ports of its own, stopped after the module."""
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_LOCAL_DIR": str(state), "SLURM_LOCAL_PORT": str(_free_ports(3))}
    started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=240)
    if started.returncode == 3:  # the packages are not installed, or not root
        pytest.skip(f"no local SLURM cluster: {started.stderr.strip().splitlines()[-1]}")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        why = accounting_fails({**env, "SLURM_CONF": str(state / "slurm.conf")})
        if why:  # submitit learns a job's end from sacct: without it a sweep waits out its timeout
            pytest.skip(
                f"SLURM's accounting does not answer ({why}): the slurm tests need slurmdbd "
                "(apt-get install slurmdbd mariadb-server)"
            )
        yield {"SLURM_CONF": str(state / "slurm.conf"), "state": str(state)}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def accounting_fails(env: Dict[str, str]) -> str:
    """Why `sacct` cannot answer on this cluster (no slurmdbd, accounting off), or "" where it does."""
    try:
        done = subprocess.run(["sacct", "-X", "-n", "-S", "now"], env=env, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sacct: {err}"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f"sacct exits {done.returncode}: {lines[-1] if lines else 'no message'}" if done.returncode else ""


def sacct(slurm: Dict[str, str], *job_ids: str) -> Dict[str, str]:
    """Job id (as squeue shows it, array tasks as 7_0) -> state, from SLURM's accounting once every job there has
    ended (slurmctld reports to slurmdbd a moment after a job ends); printed for the record."""
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(
            [
                "sacct",
                "-X",
                "-n",
                "-P",
                "-o",
                "JobID,State,AllocCPUS,Elapsed",
                *[a for j in job_ids for a in ("-j", j)],
            ],
            env={**os.environ, **slurm},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        states = {line.split("|")[0]: line.split("|")[1] for line in out.splitlines() if line}
        if states and not {"PENDING", "RUNNING", "COMPLETING"} & set(states.values()) or time.monotonic() > deadline:
            print(out)
            return states
        time.sleep(1)


def squeue_id(tags: Dict[str, str]) -> str:
    """The id squeue, scancel and sacct show for the job that made a run: array task 7_0, else the job id."""
    if "wif.slurm_array_task_id" in tags:
        return f"{tags['wif.slurm_array_job_id']}_{tags['wif.slurm_array_task_id']}"
    return tags["wif.slurm_job_id"]


def _running_run(uri: str, timeout: float = 180) -> Dict[str, str]:
    """The tags of the first run the server shows RUNNING with a SLURM job id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [r for r in train_runs(uri, status="RUNNING") if "wif.slurm_job_id" in r.data.tags]
        if running:
            return running[0].data.tags
        time.sleep(0.5)
    raise AssertionError(f"no run was RUNNING on SLURM within {timeout:.0f} s")


def test_a_slurm_sweep_into_a_server_a_cancelled_job_and_the_resume(
    tmp_path: Path,
    cache_dir: Path,
    slurm: Dict[str, str],
    server: MlflowServer,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two jobs of a SLURM array into a real server; one is scancel-ed while its run is RUNNING: its run is
    KILLED, the tally says 1 killed and the command fails; the same command again runs only that one."""
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    sweep = (
        "hydra/launcher=slurm",
        *ON_THE_NODE,
        "loader=baseline,pin",
        *SMOKE,
        "trainer.epochs=15",
        f"tracking.uri={server.uri}",
    )
    proc = start_train(tmp_path, server.uri, cache_dir, *sweep)
    try:
        victim = _running_run(server.uri)
        subprocess.run(["scancel", squeue_id(victim)], check=True, timeout=30)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_FAILED, out[-3000:]
    assert "Sweep done: 1 finished, 0 failed, 1 killed, 0 skipped" in out, out[-3000:]
    assert f"job {squeue_id(victim)} ended without a result (CANCELLED" in out, out[-3000:]
    killed = train_runs(server.uri, status="KILLED")
    assert [squeue_id(r.data.tags) for r in killed] == [squeue_id(victim)]
    assert "SIGTERM" in killed[0].data.tags["wif.error"]  # it ended itself on SLURM's SIGTERM, before the SIGKILL

    again = run_train(tmp_path, server.uri, cache_dir, *sweep, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "Sweep done: 1 finished, 0 failed, 0 killed, 1 skipped" in again.stdout + again.stderr

    finished = train_runs(server.uri, status="FINISHED")
    assert sorted(r.data.tags["wif.loader"] for r in finished) == ["baseline", "pin"]
    assert not train_runs(server.uri, status="RUNNING") and len(train_runs(server.uri)) == 3
    for run in finished:  # each tagged with its own SLURM job, which SLURM's accounting saw complete
        tags = run.data.tags
        assert tags["wif.launcher"] == "slurm" and tags["wif.slurm_partition"] == "debug"
        assert tags["wif.node"] == socket.gethostname().split(".")[0]
    ids: List[str] = [squeue_id(r.data.tags) for r in finished]
    assert len(set(ids)) == 2 and squeue_id(victim) not in ids
    states = sacct(slurm, *{i.split("_")[0] for i in ids + [squeue_id(victim)]})
    assert all(states[i] == "COMPLETED" for i in ids), states
    assert states[squeue_id(victim)].startswith("CANCELLED"), states
    log = Path(next(tmp_path.glob(f"multirun/*/*/.submitit/{squeue_id(victim)}/*_log.err")))
    assert "CANCELLED" in log.read_text()  # each job's log, under the sweep's .submitit/<job id>/


def test_slurm_ddp_runs_one_two_rank_job_on_the_node(
    tmp_path: Path,
    cache_dir: Path,
    slurm: Dict[str, str],
    server: MlflowServer,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    proc = run_train(
        tmp_path,
        server.uri,
        cache_dir,
        "hydra/launcher=slurm_ddp",
        "trainer.nproc=2",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=2",
        "hydra.launcher.mem_gb=2",
        "hydra.launcher.timeout_min=10",
        "loader=baseline",
        *SMOKE,
        f"tracking.uri={server.uri}",
        "tracking.experiment=ddp",
        timeout=400,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run,) = train_runs(server.uri, experiment="ddp")
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["wif.world_size"] == "2" and tags["wif.dist_backend"] == "gloo"
    assert tags["wif.launcher"] == "slurm_ddp" and "wif.slurm_job_id" in tags
    client = MlflowClient(server.uri)
    assert {"rank0_epoch_time_s", "rank1_epoch_time_s"} <= client.get_run(run.info.run_id).data.metrics.keys()
    job = squeue_id(tags)
    state = sacct(slurm, job.split("_")[0])
    assert state[job] == "COMPLETED", state
