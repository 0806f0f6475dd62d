"""Exit codes a script can trust, a whole sweep checked before its first job, and errors raised in
DataLoader workers shown as one line (the traceback in the job's log file and the run's error.txt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import torch
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset

from tests.conftest import CONF, run_train, start_train, train_runs
from tests.images import data_cfg, image_folder
from tests.servers import busy_server, silent_uri
from wif.config import ConfigError, as_plain
from wif.config.exits import EXIT_INTERRUPTED, describe
from wif.data.folder_check import check_folder
from wif.sweep.callback import plan_jobs
from wif.sweep.preflight import _Composer, _typed, bad_jobs, job_names


@pytest.fixture
def sweep() -> Iterator:
    """plan(*overrides): the master config and planned jobs of `train.py -m OVERRIDES`, composed by Hydra
    as a multirun composes them (the Hydra context stays open for the checks)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()

        def plan(*overrides: str) -> Tuple[DictConfig, List[List[str]]]:
            master = loader.load_configuration("config", list(overrides), run_mode=RunMode.MULTIRUN)
            return master, plan_jobs(master.hydra.sweeper.params, master.hydra.overrides.task)

        yield plan


def test_every_bad_job_is_listed_with_its_reason(sweep) -> None:
    master, jobs = sweep("loader=baseline,no_such_option", "data.fraction=0.1,1.5,abc", "repeat=0")
    bad = dict(zip((" ".join(job) for job, _ in bad_jobs(master, jobs)), (why for _, why in bad_jobs(master, jobs))))
    assert len(jobs) == 6 and len(bad) == 5
    assert "is outside (0, 1]" in bad["repeat=0 loader=baseline data.fraction=1.5"]
    wrong_type = bad["repeat=0 loader=baseline data.fraction=abc"]
    assert wrong_type.endswith("'abc' of type 'str' could not be converted to Float"), wrong_type
    assert all("Could not find 'loader/no_such_option'" in why for key, why in bad.items() if "no_such" in key)
    assert job_names(jobs)[1] == "loader=baseline data.fraction=1.5"  # named by what varies across the sweep


def test_shared_composition_gives_each_job_the_config_hydra_composes(sweep) -> None:
    master, jobs = sweep(
        "loader=baseline,pin_nb_w4_pf2",
        "data=synthetic,encoded",
        "data.fraction=0.1,0.4",
        "loader.num_workers=2",
        "preset=smoke",
        "repeat=0,1",
    )
    composer = _Composer(master)
    assert len(jobs) == 16
    for job in jobs:
        full = _typed(composer.loader.load_sweep_config(master, list(job)))
        assert as_plain(composer.config(job)) == as_plain(full), job
    assert len(composer.bases) == 4  # one Hydra composition per loader x data choice


def test_a_sweep_for_other_machines_is_not_judged_by_this_one(sweep) -> None:
    job = ("device=cuda", "data=folder", "data.root=/only/on/the/nodes", "data.fraction=0.1,0.4", "repeat=0")
    assert len(bad_jobs(*sweep(*job))) == 2  # run here: no such folder
    assert not bad_jobs(*sweep("hydra/launcher=slurm", *job))  # each job checks its own node


@pytest.mark.slow
def test_a_bad_value_refuses_the_sweep_before_any_job(tmp_path: Path, store: str, cache_dir: Path) -> None:
    proc = run_train(tmp_path, store, cache_dir, "loader=baseline", "data.fraction=0.1,1.5,0.4", "preset=smoke")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "1 of 3 jobs" in out and "data.fraction=1.5" in out, out[-3000:]
    assert "started on" not in out and "Traceback" not in out
    assert not train_runs(store)


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler of its own for `sig` (Linux's SigCgt mask)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(line.split()[1] for line in status if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_an_interrupt_before_the_run_opened_is_one_line(tmp_path: Path, cache_dir: Path) -> None:
    """A tracking server that answers 503 is retried by MLflow's client for minutes: a `kill` then ended wif-study
    with two tracebacks. Now one line and exit 130."""
    with busy_server() as busy:
        proc = start_train(tmp_path, busy, cache_dir, "preset=smoke", multirun=False)
        out = _terminated_in_the_retries(proc)
    assert proc.returncode == EXIT_INTERRUPTED, out[-2000:]
    assert "Interrupted; run the same command again to resume." in out and "Traceback" not in out, out[-2000:]


def _terminated_in_the_retries(proc: subprocess.Popen) -> str:
    """SIGTERM once the job's handlers are set and MLflow is retrying; its output."""
    try:
        deadline = time.monotonic() + 120
        while not _catches(proc.pid, signal.SIGUSR2):  # wif's handlers are set as the job starts
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-2000:]
            time.sleep(0.1)
        time.sleep(2)  # into the store's retries
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=60)[0]
    finally:
        proc.kill()


COMMANDS = {  # each command that opens the store, as a user types it
    "study": ["wif-study", "preset=smoke"],
    "study -m": ["wif-study", "-m", "preset=smoke"],
    "advise": ["wif-advise", "preset=smoke"],
    "advise --": ["wif-advise", "--", sys.executable, "script.py"],
    "tune": ["wif-tune", "preset=smoke"],
    "plan": ["wif-plan", "preset=smoke"],
    "report": ["wif-report"],
}


def test_a_tracking_server_that_does_not_answer_refuses_every_command_before_it_starts(tmp_path: Path) -> None:
    """Each command waited minutes on MLflow's retries of a server that is down (wif-advise ran the user's script
    first). Now each is one line and exit 2, before anything runs; the commands run side by side."""
    (tmp_path / "script.py").write_text("open('script-ran', 'w')\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": silent_uri()}
    bin_dir = Path(sys.executable).parent
    started = {
        name: subprocess.Popen(
            [str(bin_dir / argv[0]) if argv[0].startswith("wif") else argv[0], *argv[1:]],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, argv in COMMANDS.items()
    }
    try:
        ended = {name: proc.communicate(timeout=120)[0] for name, proc in started.items()}  # MLflow retries longer
    finally:
        for proc in started.values():
            proc.kill()
    for name, out in ended.items():
        proc = started[name]
        said = [line for line in out.splitlines() if "gave no answer within 10 s" in line]
        assert proc.returncode == 2 and len(said) == 1, (name, out[-2000:])
        assert "Retrying" not in out and "Traceback" not in out, (name, out[-2000:])
    assert not (tmp_path / "script-ran").exists()


@pytest.mark.slow
def test_a_sweep_whose_jobs_run_in_their_own_processes_fails_when_one_of_them_failed(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """Its jobs' tallies never reach the submitting process: it reads them from the runs (test_local_gpus.py
    has a sweep of this kind that finishes)."""
    root = image_folder(tmp_path / "images")  # 5% of its 8 training images is none: that job fails
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "hydra/launcher=submitit_local",
        "hydra.launcher.gpus_per_node=0",
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.fraction=0.05",
        "data.val_split=0.25",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "0 finished, 1 failed" in out and "failed: baseline-f0.05-r0: ConfigError" in out, out[-3000:]


class _Unreadable(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        try:
            raise OSError("disk gone")
        except OSError as err:  # chained, as wif.data raises its own error from the decoder's
            raise ConfigError(f"cannot read sample {i}. Replace it.") from err


def test_an_error_from_a_worker_is_described_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        next(iter(DataLoader(_Unreadable(), num_workers=1)))
    assert "Traceback" in str(caught.value)  # as PyTorch hands it over
    name, message = describe(caught.value, num_workers=1)
    assert (name, message) == ("ConfigError", "cannot read sample 0. Replace it. (raised in DataLoader worker 0)")
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert "DataLoader worker process died" in describe(reset, num_workers=2)[1]
    assert describe(reset, num_workers=0) == ("ConnectionResetError", str(reset))


@pytest.mark.slow
def test_a_failing_single_run_exits_1_and_keeps_the_worker_traceback_for_the_log(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    root = image_folder(tmp_path / "images")
    check_folder(data_cfg(cache_dir, "data=folder", f"data.root={root}"))  # an earlier run's check, cached
    damaged = root / "train" / "class1" / "2.png"  # since damaged in place: same size, same mtime
    st = damaged.stat()
    damaged.write_bytes(b"x" * st.st_size)
    os.utime(damaged, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.fraction=1.0",
        "data.val_split=0.25",
        "loader=pin_nb_w4_pf2",
        "loader.num_workers=2",
        multirun=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (line,) = [line for line in out.splitlines() if "FAILED" in line]
    assert "class1/2.png" in line and "DataLoader worker" in line
    (run,) = train_runs(store)
    assert run.info.status == "FAILED"
    (log_file,) = tmp_path.glob("outputs/*/*/train.log")
    assert "Traceback" in log_file.read_text() and "_worker_loop" in log_file.read_text()
    error_txt = MlflowClient(store).download_artifacts(run.info.run_id, "error.txt", str(tmp_path))
    assert "_worker_loop" in Path(error_txt).read_text()


def test_a_commands_exit_runs_every_exit_handler_and_skips_the_last_collection(tmp_path: Path) -> None:
    """quick_exit: the exit handlers a command relies on (MLflow's, logging's) still run; only the
    collection of what torch and MLflow leave behind is skipped (a second of every command's exit)."""
    script = f"""
import atexit, pathlib
from wif.config.exits import quick_exit
quick_exit()
out = pathlib.Path({str(tmp_path)!r})
class Cycle:
    def __del__(self): (out / "collected").write_text("")
c = Cycle(); c.me = c; del c
atexit.register(lambda: (out / "handler").write_text(""))
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert (tmp_path / "handler").exists()
    assert not (tmp_path / "collected").exists()
    subprocess.run([sys.executable, "-c", script.replace("quick_exit()", "")], check=True, timeout=60)
    assert (tmp_path / "collected").exists()  # without it the exit collects the cycle: the check above can fail
