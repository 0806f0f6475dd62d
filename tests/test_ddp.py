"""trainer.nproc=2 on the CPU (gloo): the real train.py, two ranks started by torch's elastic launcher, the real
MLflow store. One finished run is shared by the assertions that can read it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Tuple

import psutil
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.conftest import compose_cfg, new_store, run_train, start_train, train_runs
from tests.launchers import compose_hydra, sbatch_script
from tests.processes import left_in_session, sigkill_and_expect_gone
from wif.config import ConfigError, validate, warnings_for
from wif.config.targets import typed
from wif.measure.tracking import config_hash
from wif.sweep.identity import cell_name, run_identity

DDP = ("preset=smoke", "trainer.nproc=2", "device=cpu")
# 160 training images of preset=smoke shared by 2 ranks in batches of 64: 2 steps per rank and epoch
STEPS_PER_EPOCH = 2
LONG = (*DDP, "loader.num_workers=1", "loader.persistent_workers=true", "trainer.epochs=50")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Tuple[MlflowClient, object]:
    tmp = tmp_path_factory.mktemp("ddp")
    store = new_store(tmp)
    proc = run_train(
        tmp,
        store,
        cache_dir,
        *DDP,
        "measure.rank_indices=true",
        "loader.num_workers=1",
        "loader.persistent_workers=true",
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run,) = train_runs(store)
    return MlflowClient(store), run


def _until(proc: subprocess.Popen, text: str, timeout: float = 300) -> str:
    """The output of train.py up to the first line holding `text` (the run is then where the test wants it)."""
    seen, deadline = [], time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no line with {text!r}:\n{''.join(seen)[-3000:]}")


@pytest.mark.slow
def test_two_ranks_finish_with_the_world_size_and_each_ranks_figures(finished: tuple) -> None:
    client, run = finished
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.nproc"] == "2" and run.data.tags["wif.world_size"] == "2"
    assert run.data.tags["wif.dist_backend"] == "gloo" and int(run.data.tags["wif.threads_per_rank"]) >= 1
    m = run.data.metrics
    for rank in (0, 1):
        for key in ("epoch_time_s", "data_wait_s", "compute_s", "samples"):
            assert f"rank{rank}_{key}" in m, key
    assert m["rank0_samples"] + m["rank1_samples"] == int(run.data.tags["wif.n_train"])
    history = {
        key: {p.step: p.value for p in client.get_metric_history(run.info.run_id, key)}
        for key in ("epoch_time_s", "rank0_epoch_time_s", "rank1_epoch_time_s")
    }
    assert len(history["epoch_time_s"]) == 3
    for step, job in history["epoch_time_s"].items():  # the job's epoch is its slowest rank's
        assert job == max(history["rank0_epoch_time_s"][step], history["rank1_epoch_time_s"][step])
    # RAM of the whole tree: the launcher, both ranks (each has torch loaded: well above one process's)
    assert m["ram_peak_pss_mb"] > 0 and m["ram_peak_rss_mb"] > m["ram_peak_pss_mb"] > 0
    # workers counted as workers, per rank: a persistent worker for each of a rank's train and validation
    # loaders, and the test loader's for the moment it lives (seen only when a sample falls in it: CI saw 2, a
    # quiet machine 3); the ranks and the launcher's helpers are not workers (they were counted: 8 or more here)
    assert m["rank0_workers_peak"] in (2, 3) and m["rank1_workers_peak"] in (2, 3), m
    assert 2 <= m["workers_peak"] <= 6, m


@pytest.mark.slow
def test_the_ranks_see_disjoint_shards_that_make_the_epoch_in_a_new_order_each_epoch(
    finished: tuple, tmp_path: Path
) -> None:
    client, run = finished
    shards = json.loads(
        Path(client.download_artifacts(run.info.run_id, "rank_indices.json", str(tmp_path))).read_text()
    )
    n_train = int(run.data.tags["wif.n_train"])
    assert sorted(shards) == ["0", "1"] and sorted(shards["0"]) == ["0", "1", "2"]
    for epoch in ("0", "1", "2"):
        a, b = shards["0"][epoch], shards["1"][epoch]
        assert not set(a) & set(b)
        assert sorted(a + b) == list(range(n_train))
    for rank in ("0", "1"):
        assert shards[rank]["0"] != shards[rank]["1"] != shards[rank]["2"]  # set_epoch: a new order each epoch


@pytest.mark.slow
def test_a_rank_that_raises_in_epoch_2_fails_the_run_within_30_s_and_leaves_nothing(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    proc = start_train(
        tmp_path,
        store,
        cache_dir,
        *DDP,
        "trainer.epochs=50",
        "model=custom",
        "model._target_=tests.user_factories.FailsOnRank",
        "+model.kwargs.rank=1",
        f"+model.kwargs.step={STEPS_PER_EPOCH + 1}",
        multirun=False,
    )
    _until(proc, "epoch 1/50")
    t_epoch2 = time.monotonic()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1 and time.monotonic() - t_epoch2 < 30, out[-3000:]
    (run,) = train_runs(store)
    error = run.data.tags["wif.error"]
    assert run.info.status == "FAILED" and "\n" not in error
    assert error == "RuntimeError: rank 1: rank 1 breaks at training step 3"
    assert "epoch 2/50" not in out
    time.sleep(1)
    assert not left_in_session(proc.pid)


@pytest.mark.slow
def test_a_python_error_in_the_launcher_is_the_runs_one_line(tmp_path: Path, store: str, cache_dir: Path) -> None:
    """The launching process raises before any rank starts: its socket for the ranks (AF_UNIX, in TMPDIR) has a
    path longer than the kernel takes. The user's line names that exception, not a process that died (it said
    "killed by a signal, out of memory, or a crash in native code"); torch 2.11's TypeError came this way."""
    tmpdir = tmp_path / ("t" * 110)  # sockaddr_un holds 108 bytes
    tmpdir.mkdir()
    proc = run_train(tmp_path, store, cache_dir, *DDP, multirun=False, timeout=300, env={"TMPDIR": str(tmpdir)})
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    (run,) = train_runs(store)
    assert run.info.status == "FAILED" and run.data.tags["wif.error"] == "OSError: AF_UNIX path too long"
    out = proc.stdout + proc.stderr
    assert "FAILED: OSError: AF_UNIX path too long" in out and "Traceback" not in out, out[-3000:]


@pytest.mark.slow
def test_sigint_ends_every_rank_and_the_run_is_killed(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = start_train(tmp_path, store, cache_dir, *LONG, multirun=False)
    # Beside other work two ranks and their workers share the cores with it: their start and first epoch
    # took over 300 s on a fresh clone beside two sweeps and a training script.
    _until(proc, "epoch 1/50", timeout=900)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole foreground group
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    (run,) = train_runs(store)
    assert run.info.status == "KILLED"
    time.sleep(1)
    assert not left_in_session(proc.pid)


@pytest.mark.slow
def test_sigkill_of_the_supervisor_leaves_no_rank_or_worker(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = start_train(tmp_path, store, cache_dir, *LONG, multirun=False)
    _until(proc, "epoch 1/50")
    tree = [p for p in left_in_session(proc.pid) if p.pid != proc.pid]
    assert len(tree) >= 5  # the launcher, 2 ranks, a worker each
    (launcher,) = psutil.Process(proc.pid).children()
    # Each rank's workers are forked, as in a one-process run (a forked worker has its rank's command line; a
    # spawned one, as a spawned rank's inherited default would start, its own spawn_main line)
    workers = [(w, rank) for rank in launcher.children() for w in rank.children()]
    assert len(workers) >= 2 and all(w.cmdline() == rank.cmdline() for w, rank in workers)
    sigkill_and_expect_gone(proc, tree)


def test_too_many_busy_processes_for_the_cores_are_named_in_a_warning() -> None:
    conf = typed(compose_cfg("preset=smoke", "trainer.nproc=2", "loader.num_workers=4"))
    (warning,) = [w for w in warnings_for(conf, False, 8) if "trainer.nproc" in w]
    assert "trainer.nproc=2 x (loader.num_workers=4 + 1) = 10" in warning and "8 usable cores" in warning
    assert not [w for w in warnings_for(conf, False, 10) if "trainer.nproc" in w]


@pytest.mark.parametrize(
    "overrides",
    [
        ("trainer.nproc=0",),
        ("trainer.nproc=2", "engine=nodes_threads", "loader.num_workers=2"),
        ("trainer.nproc=2", "loader=gpu_resident"),
        ("trainer.nproc=2", "data=fixed"),
        ("trainer.nproc=2", "data=encoded", "data.format=shards"),
    ],
)
def test_what_ranks_cannot_shard_is_refused(overrides: tuple) -> None:
    with pytest.raises(ConfigError, match="trainer.nproc"):
        validate(typed(compose_cfg("preset=smoke", *overrides)))


def test_the_ddp_study_sweeps_one_and_two_ranks_over_a_few_loader_options() -> None:
    params = compose_hydra("+study=ddp").hydra.sweeper.params
    assert params["trainer.nproc"] == "1,2" and len(params["loader"].split(",")) >= 3
    conf = typed(compose_cfg("+study=ddp", "trainer.nproc=2", "loader=pin_nb_w4_pf2"))
    validate(conf)
    assert cell_name(conf) == "pin_nb_w4_pf2+ddp2@0.4"  # never pooled with the one-process cell
    one = typed(compose_cfg("+study=ddp", "trainer.nproc=1", "loader=pin_nb_w4_pf2"))
    assert config_hash(run_identity(conf, "cpu")) != config_hash(run_identity(one, "cpu"))  # the world size is identity
    assert "nproc" not in run_identity(one, "cpu")["trainer"]  # runs from before trainer.nproc resume as the same jobs


def test_the_slurm_ddp_launcher_asks_one_task_with_a_gpu_per_rank() -> None:
    cfg = compose_hydra("hydra/launcher=slurm_ddp", "trainer.nproc=8", "hydra.launcher.partition=gpu")
    launcher = OmegaConf.create(OmegaConf.to_container(cfg.hydra.launcher, resolve=True))  # as Hydra instantiates it
    assert launcher._target_ == "hydra_plugins.wif_launcher.launchers.SlurmLauncher"
    script = sbatch_script(launcher, jobs=6)
    for line in ("--gpus-per-node=8", "--ntasks-per-node=1", "--nodes=1", "--cpus-per-task=80", "--partition=gpu"):
        assert f"#SBATCH {line}" in script, line
    assert launcher.cpus_per_task >= 8 * (8 + 1)  # 8 ranks x (8 workers + 1): the sizing rule


def test_the_jobs_vram_is_each_ranks_their_maximum_and_the_peak_of_their_sum() -> None:
    """Per-rank samples as the sampler keeps them (workers of rank 0, 1, then VRAM MB of rank 0, 1): the job's
    VRAM figure is the largest rank's peak, the sum's peak is over samples taken together."""
    from wif.measure.epochs import Series, rank_peaks

    s = Series()
    for t, row in enumerate([(1, 2, 900.0, 500.0), (2, 2, 1000.0, 700.0), (2, 3, 400.0, 1200.0)]):
        s.add(float(t), *row)
    out = rank_peaks(s, 2, 0.0, 2.0)
    assert (out["rank0_workers_peak"], out["rank1_workers_peak"]) == (2, 3)
    assert (out["rank0_vram_peak_device_mb"], out["rank1_vram_peak_device_mb"]) == (1000.0, 1200.0)
    assert out["vram_peak_device_mb"] == 1200.0 and out["vram_peak_device_sum_mb"] == 1700.0  # not 2200: never together
    cpu = Series()
    cpu.add(0.0, 1, 1, None, None)
    assert "vram_peak_device_mb" not in rank_peaks(cpu, 2, 0.0, 1.0)
    late = Series()  # rank 1 registered after the first sample: that row has rank 0's columns only (CI's
    late.add(0.0, 0, 300.0)  # IndexError before, when a rank started later than the sampler's first tick)
    late.add(1.0, 1, 2, 400.0, 600.0)
    out = rank_peaks(late, 2, 0.0, 1.0)
    assert out["rank1_vram_peak_device_mb"] == 600.0 and out["vram_peak_device_sum_mb"] == 1000.0
    assert (out["rank0_workers_peak"], out["rank1_workers_peak"]) == (1, 2)  # the short row's 300.0 is no count
