"""A torchrun job under the watch alone, on 2 gloo ranks: its windows close at the same batch on every rank, so
no rank waits for good; and a torchrun command that runs out of time leaves no rank alive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional, Tuple

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import new_store, selected_cases
from wif.advisor.script.command import execute
from wif.measure import names
from wif.watcher.orders import ENV

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
EPOCHS = """
import os, sys, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
rank = dist.get_rank()
data = TensorDataset(torch.randn(48, 4), torch.zeros(48, dtype=torch.long))
loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data))  # 12 batches a rank and epoch
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        time.sleep(0.15)  # epochs of about 2 s: windows of 1 s cut them
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} epoch {epoch} done", flush=True)
    if rank == 0:
        time.sleep(0.7)  # validation and saving, on rank 0 alone
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def watched_job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tuple[Optional[subprocess.Popen], str]]:
    """The torchrun job of EPOCHS under `wif-watch` with windows of 1 s, started where its test is selected: its
    process and its store. It runs while the module's first test waits on its own torchrun, which takes no CPU
    past its start."""
    job_test = "test_a_torchrun_job_under_the_watch_alone_ends_every_epoch_with_windows_of_one_second"
    if not selected_cases(request, job_test):
        yield None, ""
        return
    where = tmp_path_factory.mktemp("watched")
    store = new_store(where)
    script = where / "ddp.py"
    script.write_text(EPOCHS)
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update(MLFLOW_TRACKING_URI=store, PYTHONPATH=str(ROOT), WIF_WATCH_WINDOW_S="1", PYTHONUNBUFFERED="1")
    watch = [sys.executable, "-m", "wif.watcher.hook", "--"]
    command = [*watch, *TORCHRUN, str(script)]
    proc = subprocess.Popen(command, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc, store
    if proc.poll() is None:  # its test failed before it ended
        proc.kill()
        proc.communicate()


HUNG = """
import os, signal, subprocess, sys, time
rank = os.environ["RANK"]
if rank == "0":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank stuck in a collective's C code: SIGKILL alone ends it
pids = [os.getpid()]
if rank == "1":  # a rank's own child, as a DataLoader worker is
    pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)
with open(f"pids-{rank}.txt", "w") as out:
    out.write(" ".join(map(str, pids)))
time.sleep(600)
"""


def test_a_torchrun_command_that_runs_out_of_time_leaves_no_rank_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watched_job: Tuple[Optional[subprocess.Popen], str]
) -> None:
    """wif-advise's timeout ends torchrun, its ranks (each in a session of its own) and their children, a rank
    that ignores SIGTERM included (before: torchrun alone was killed, and its ranks ran on)."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    monkeypatch.chdir(tmp_path)  # torchrun runs its ranks where it is started: they write their pids here
    log = str(tmp_path / "out.log")
    rc, last = execute([*TORCHRUN, str(script)], {"mode": "probe"}, log, timeout=30, warm_start=False)
    assert rc == -1 and "ran out" in last
    written = [tmp_path / f"pids-{rank}.txt" for rank in (0, 1)]
    assert all(f.exists() for f in written), (tmp_path / "out.log").read_text()[-2000:]  # both ranks had started
    pids = [int(p) for f in written for p in f.read_text().split()]
    assert len(pids) == 3 and not [p for p in pids if _running(p)], pids


@pytest.mark.slow
def test_a_torchrun_job_under_the_watch_alone_ends_every_epoch_with_windows_of_one_second(
    watched_job: Tuple[Optional[subprocess.Popen], str],
) -> None:
    """Windows of 1 s in epochs of 2 s, rank 0 0.7 s late into each: every epoch of both ranks ends (before: each
    rank closed its window by its own clock and gathered, the other rank sat in the step's all-reduce, and no
    epoch ended in 90 s), and the run holds the job's windows of all three epochs."""
    proc, store = watched_job
    assert proc is not None
    stdout, stderr = proc.communicate(timeout=240)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = sorted(re.findall(r"rank \d epoch \d done", done.stdout))  # the ranks' lines may interleave
    assert finished == [f"rank {r} epoch {e} done" for r in (0, 1) for e in range(3)], done.stdout
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("who_is_faster").experiment_id])
    epochs = [int(m.value) for m in client.get_metric_history(run.info.run_id, names.SCRIPT_EPOCH)]
    windowed = [m.value for m in client.get_metric_history(run.info.run_id, names.WINDOWED)]
    assert sorted(set(epochs)) == [0, 1, 2] and len(epochs) > 3 and 1.0 in windowed  # later epochs cut in windows
    assert {"rank0_epoch_time_s", "rank1_epoch_time_s"} <= set(run.data.metrics)  # the job's windows, gathered


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
