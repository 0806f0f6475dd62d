"""`wif.watch` in loops as people write them, each a real script in a subprocess on a real SQLite store: a
new tqdm, generator or DataLoader every epoch is one watch; a loop that leaves its epochs early still ends a
measurement where it should; a store that cannot be written never ends the training; and a torchrun job is one
run. The watch's parts in this process: tests/test_watch_parts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.servers import MlflowServer, silent_uri
from tests.watching import HEAD, run_loop, watch_runs
from wif.watcher.orders import ENV

ROOT = Path(__file__).resolve().parents[1]
LOOPS = """
from tqdm import tqdm

def batches(dl):
    for b in dl:
        yield b

bar_loader, per_epoch = DataLoader(Slow(), batch_size=16), Slow()  # three training sets: three watches
for epoch in range(3):
    for x, y in wif.watch(tqdm(bar_loader), run_name="tqdm"):
        pass
for epoch in range(3):
    for x, y in wif.watch(batches(loader), run_name="generator"):
        pass
for epoch in range(3):
    for x, y in wif.watch(DataLoader(per_epoch, batch_size=16), run_name="dataloader"):
        pass
"""


def test_a_new_iterable_each_epoch_is_one_watch(tmp_path: Path, store: str) -> None:
    """A new tqdm around the loader, a new generator over it, or a new DataLoader over the same dataset, every
    epoch: one watch each, its 3 epochs in one run (before: a new watch each epoch, three runs of one epoch)."""
    pytest.importorskip("tqdm")
    done = run_loop(tmp_path, LOOPS, store)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(":")[1] for line in done.stderr.splitlines() if line.startswith("wif.watch: epoch")]
    assert lines == [" epoch 1", " epoch 2", " epoch 3"] * 3, done.stderr
    found = {r.info.run_name: r for r in watch_runs(store)}
    assert sorted(found) == ["dataloader", "generator", "tqdm"]
    for watched in found.values():
        assert watched.data.metrics["epochs_run"] == 3 and watched.info.status == "FINISHED"
        assert watched.data.params["batch_size"] == "16"


def test_a_loop_that_breaks_out_of_each_epoch_ends_its_measurement(tmp_path: Path, store: str) -> None:
    """Orders for 2 epochs, a loop that leaves each epoch after 3 batches and would run 4 epochs: the
    measuring run times 2 epochs of 3 batches and the script ends at the third epoch's start (before: all 4
    epochs ran, the orders never obeyed)."""
    client = MlflowClient(store)
    exp = client.create_experiment("who_is_faster")
    run_id = client.create_run(exp).info.run_id
    body = """
    for epoch in range(4):
        for i, (x, y) in enumerate(wif.watch(loader)):
            if i == 2:
                break
        print(f"validated {epoch}", flush=True)
    print("the script's own end", flush=True)
    """
    orders = {
        "uri": store,
        "experiment": "who_is_faster",
        "run_id": run_id,
        "mode": "train",
        "batches": 50,
        "epochs": 2,
    }
    done = run_loop(tmp_path, body, store, orders)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["validated", "0", "validated", "1"]  # left at the third epoch's start
    history = client.get_metric_history(run_id, "batches")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [3.0, 3.0]
    assert client.get_run(run_id).data.tags["wif.stop_reason"] == "2 epochs (fixed)"


def test_a_store_that_cannot_be_written_never_ends_the_training(tmp_path: Path) -> None:
    """Before, the first epoch's end opened the store in the loop and its error ended the script with a
    traceback; now one line says so and every epoch trains."""
    body = """
    for epoch in range(3):
        for x, y in wif.watch(loader):
            pass
        print(f"trained {epoch}", flush=True)
    """
    (tmp_path / "a-file").write_text("")  # a store under a file: no folder can be made there, even by root
    for store in (f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}", silent_uri()):  # a server that is down
        # MLflow's client retried a server that is down for minutes, in the loop: the timeout is below that
        done = run_loop(tmp_path, body, store, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["trained", "0", "trained", "1", "trained", "2"]
        said = [line for line in done.stderr.splitlines() if "cannot be written" in line]
        assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_tracking_server_that_dies_mid_run_never_holds_the_scripts_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server is killed after the second epoch. The script's exit waited 6 minutes on MLflow's retries of
    the last epochs and the summary; now one line says what was not logged, and the script ends."""
    body = """
    import os, signal
    for epoch in range(4):
        for x, y in wif.watch(loader):
            pass
        if epoch == 1:
            os.killpg(int(os.environ["SERVER_PGID"]), signal.SIGKILL)  # the server dies mid-run
        print(f"trained {epoch}", flush=True)
    """
    server = MlflowServer(tmp_path).start()
    monkeypatch.setenv("SERVER_PGID", str(server.proc.pid))
    try:
        done = run_loop(tmp_path, body, server.uri, timeout=120)
    finally:
        server.stop()
    assert done.returncode == 0 and done.stdout.split()[-1] == "3", done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "stopped answering" in line]
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (left,) = watch_runs(f"sqlite:///{tmp_path / 'server.db'}")  # read from the dead server's own database
    assert left.info.status == "RUNNING" and left.info.run_id in said[0]


def test_the_orders_go_to_the_training_loader_not_a_sanity_pass(tmp_path: Path, store: str) -> None:
    """A validation pass over a watched loader before training (as Lightning's sanity check runs it, under
    no_grad): wif-advise's probe names the training loader (before, the first loader watched got the orders)."""
    body = """
    class Val(Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            return torch.zeros(4), 0

    val = DataLoader(Val(), batch_size=8)
    with torch.no_grad():
        for x, y in wif.watch(val):
            pass
    for epoch in range(2):
        for x, y in wif.watch(loader):
            pass
    """
    out = tmp_path / "probed.json"
    done = run_loop(tmp_path, body, store, {"uri": "", "run_id": None, "mode": "probe", "out": str(out)})
    assert done.returncode == 0, done.stderr[-2000:]
    probed = json.loads(out.read_text())
    assert probed["dataset"] == "Slow" and probed["batch_size"] == 16 and probed["has_dataloader"]


@pytest.mark.parametrize(("mode", "lines", "logged"), [("print", 2, False), ("yes", 2, True)])
def test_wif_watch_says_how_much_to_watch(tmp_path: Path, mode: str, lines: int, logged: bool) -> None:
    """WIF_WATCH=print: the lines and no store (before, =0 was the only switch: every watched script wrote
    mlflow.db where it ran); another value is named in one line, and the watch goes on as =1."""
    body = "for epoch in range(2):\n    for x, y in wif.watch(loader):\n        pass\n"
    script = tmp_path / "train.py"
    script.write_text(HEAD + body)
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "MLFLOW_TRACKING_URI")}
    env.update(WIF_WATCH=mode, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stderr.splitlines()
    assert len([line for line in said if line.startswith("wif.watch: epoch")]) == lines, done.stderr
    assert (tmp_path / "mlflow.db").exists() == logged
    assert any("WIF_WATCH='yes' is not one of" in line for line in said) == (mode == "yes")


DDP = """
import atexit, os, sys, time, torch, torch.distributed as dist, wif
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
rank = dist.get_rank()
atexit.register(lambda: print(f"rank {rank} has a process group at exit: {dist.is_initialized()}", flush=True))
data = TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(6):
    loader.sampler.set_epoch(epoch)
    for x, y in wif.watch(loader):
        time.sleep(0.03 if rank == 1 else 0.005)  # rank 1 is the slow one
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} epoch {epoch} done", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_torchrun_job_is_one_run_and_its_ranks_leave_together(tmp_path: Path, store: str) -> None:
    """Two ranks on gloo under orders for 3 epochs: both leave at the same epoch (before: each at its own, and
    a rank left behind waited in its next all-reduce for good), into one run with the job's epochs, the slow
    rank's, and each rank's beside them (before: both ranks wrote their own figures into the one run). Their
    process group is destroyed at exit (before: left to the interpreter's teardown, where gloo aborted a rank)."""
    client = MlflowClient(store)
    run_id = client.create_run(client.create_experiment("who_is_faster")).info.run_id
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    orders = {
        "uri": store,
        "experiment": "who_is_faster",
        "run_id": run_id,
        "mode": "train",
        "batches": 50,
        "epochs": 3,
    }
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT), ENV: json.dumps(orders)}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run([*torchrun, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = sorted(re.findall(r"rank \d epoch \d done", done.stdout))  # the ranks' lines may interleave
    assert finished == [f"rank {r} epoch {e} done" for r in (0, 1) for e in (0, 1)], done.stdout  # left together
    # destroyed, as its own last line would have: left to the teardown, gloo aborted a rank on CI
    assert done.stdout.count("has a process group at exit: False") == 2, done.stdout
    assert len([line for line in done.stderr.splitlines() if line.startswith("wif.watch: epoch")]) == 3  # rank 0's
    run = client.get_run(run_id)
    m = run.data.metrics
    # DDP's all-reduce makes the fast rank wait for the slow one in its step: either can be the slowest by a hair
    assert m["slowest_rank"] in (0.0, 1.0) and {"rank0_compute_s", "rank1_compute_s"} <= set(m)
    assert m["epoch_time_s"] == pytest.approx(max(m["rank0_epoch_time_s"], m["rank1_epoch_time_s"]))
    history = client.get_metric_history(run_id, "epoch_time_s")
    assert sorted(h.step for h in history) == [0, 1, 2] and run.data.tags["wif.stop_reason"] == "3 epochs (fixed)"
