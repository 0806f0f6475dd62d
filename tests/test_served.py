"""Loader-only trials served in one process (NOTE [ Trials in one process ] in wif.watcher.served): wif-advise's
side (wif.advisor.script.command) and the watch's, with a real script in a subprocess and a real SQLite store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import psutil
from mlflow.tracking import MlflowClient

from wif.advisor.script.command import Served

SCRIPT = """
import time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # 64 items that wait 2 ms each
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i))

loader = DataLoader(Slow(), batch_size=8)
for epoch in range(100):
    for x in wif.watch(loader):
        pass
"""
TWO = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False, "in_order": True}


def test_every_trial_runs_in_one_process_each_from_a_cold_start(tmp_path: Path, store: str, monkeypatch) -> None:
    """Two candidates, one process: the first's persistent workers end before the second's orders come, the
    second (the script's own setting, no loader order) iterates the script's DataLoader, not the first's, and
    each is logged to its own run. Before, every candidate paid the script's start in a process of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WIF_ADVISE_WARM", "0")
    (tmp_path / "train.py").write_text(SCRIPT)
    client = MlflowClient(store)
    exp = client.create_experiment("who_is_faster")

    def orders(loader: Optional[Dict[str, Any]]) -> Tuple[str, Dict[str, Any]]:
        run_id = client.create_run(exp).info.run_id
        spec = {"uri": store, "experiment": "who_is_faster", "run_id": run_id, "mode": "loader_only"}
        return run_id, {**spec, "batches": 8, "epochs": 2, **({"loader": loader} if loader else {})}

    served = Served([sys.executable, "train.py"])
    two, first = orders(TWO)
    rc, last, log = served.measure(first, str(tmp_path / "first.log"), timeout=300)
    assert rc == 0, last
    pid = served.proc.pid
    assert psutil.Process(pid).children() == []  # the persistent workers ended while it waits
    own, second = orders(None)
    rc, last, again = served.measure(second, str(tmp_path / "second.log"), timeout=300)
    assert rc == 0 and served.proc.pid == pid and again == log, last
    served.close()
    assert served.proc is None and not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    for run_id, workers in ((two, 2), (own, 0)):
        metrics = client.get_run(run_id).data.metrics
        assert metrics["epochs_run"] == 2 and metrics["workers_peak"] == workers, (run_id, metrics)


def test_a_trial_that_fails_ends_its_process_and_the_next_starts_anew(tmp_path: Path, store: str, monkeypatch) -> None:
    """A candidate whose workers fail ends the served process with its error; the next candidate runs in a
    new one and is measured (before serving, each had a process of its own anyway)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WIF_ADVISE_WARM", "0")
    failing = "        if torch.utils.data.get_worker_info() is not None:\n"
    failing += "            raise RuntimeError('no workers here')\n"
    (tmp_path / "train.py").write_text(
        SCRIPT.replace("        time.sleep(0.002)\n", failing + "        time.sleep(0.002)\n")
    )
    client = MlflowClient(store)
    exp = client.create_experiment("who_is_faster")
    served = Served([sys.executable, "train.py"])
    spec = {"uri": store, "experiment": "who_is_faster", "mode": "loader_only", "batches": 8, "epochs": 2}
    first = {**spec, "run_id": client.create_run(exp).info.run_id, "loader": TWO}
    rc, last, _ = served.measure(first, "a.log", timeout=300)
    assert rc != 0 and "no workers here" in Path("a.log").read_text() and served.proc is None, last
    second = {**spec, "run_id": client.create_run(exp).info.run_id}
    rc, last, log = served.measure(second, "b.log", timeout=300)
    assert rc == 0 and log == "b.log", last
    assert client.get_run(second["run_id"]).data.metrics["epochs_run"] == 2
    served.close()


def test_the_scripts_own_persistent_workers_end_between_candidates(tmp_path: Path, store: str, monkeypatch) -> None:
    """A candidate that is the script's own setting (no loader order), 2 persistent workers: they end while the
    process waits for the next order, as a rebuilt loader's do (before, they idled on through every later trial
    and counted in its memory)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WIF_ADVISE_WARM", "0")
    own = "loader = DataLoader(Slow(), batch_size=8, num_workers=2, persistent_workers=True)"
    (tmp_path / "train.py").write_text(SCRIPT.replace("loader = DataLoader(Slow(), batch_size=8)", own))
    client = MlflowClient(store)
    exp = client.create_experiment("who_is_faster")
    served = Served([sys.executable, "train.py"])
    spec = {"uri": store, "experiment": "who_is_faster", "mode": "loader_only", "batches": 8, "epochs": 2}
    first = {**spec, "run_id": client.create_run(exp).info.run_id}
    rc, last, _ = served.measure(first, "a.log", timeout=300)
    assert rc == 0, last
    assert psutil.Process(served.proc.pid).children() == []
    assert client.get_run(first["run_id"]).data.metrics["workers_peak"] == 2
    served.close()


# No wif in it, one epoch: the claim is proven by the script's first step, not by its epoch's end.
ONE_EPOCH = """
import time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i))

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(Slow(), batch_size=8):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print("one epoch trained")
"""


def test_an_unchanged_script_of_one_epoch_runs_its_loader_only_trial(tmp_path: Path, store: str, monkeypatch) -> None:
    """Under the hook a loader-only trial starts once the script's first step proves its loader trains. Before,
    it waited for a second epoch: a script of one epoch or a stream ended with none, and wif-advise kept what
    it had ("the command ended after 0 window(s)")."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WIF_ADVISE_WARM", "0")
    (tmp_path / "train.py").write_text(ONE_EPOCH)
    client = MlflowClient(store)
    run_id = client.create_run(client.create_experiment("who_is_faster")).info.run_id
    spec = {"uri": store, "experiment": "who_is_faster", "run_id": run_id, "mode": "loader_only"}
    served = Served([sys.executable, "train.py"])
    rc, last, log = served.measure({**spec, "batches": 2, "epochs": 2, "loader": TWO}, "a.log", timeout=300)
    served.close()
    assert rc == 0, (last, Path(log).read_text()[-2000:])
    metrics = client.get_run(run_id).data.metrics
    assert metrics["epochs_run"] == 2 and metrics["workers_peak"] == 2, metrics
