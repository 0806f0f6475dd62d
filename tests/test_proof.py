"""The proof that an order reached the loader (wif.watcher.proof) reads every argument of wif.dataloader_args off a
live iterator; a loader-only trial at 0 workers is its process's last (NOTE [ Trials in one process ]). Real
DataLoaders, real scripts served in a subprocess, a real SQLite store."""

from __future__ import annotations

import sys
import weakref
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader, TensorDataset

from wif.advisor.script.command import Served
from wif.dataloader_args import BY_NAME, worker_init
from wif.measure import names
from wif.watcher.proof import UNREACHED, promised, unmet

# Each argument of the table set away from the iterated loader's: the proof must name it.
ORDERED_AWAY = {
    "num_workers": 2,
    "prefetch_factor": 3,
    "pin_memory": True,  # the iterated loader does not pin: its iterator says so on any machine
    "persistent_workers": True,
    "in_order": False,
    "multiprocessing_context": "spawn",  # the iterated loader's workers are forked (Linux's default)
    "pin_memory_device": "cuda",
    "worker_threads": 1,  # no DataLoader keyword: a worker_init_fn carries it (wif.dataloader_args.worker_init)
}


def test_every_argument_of_the_table_is_proven_off_a_live_iterator() -> None:
    """One DataLoader iterated with a forked worker; an order of the same settings is met, and an order that
    differs in any one argument of the table is said by that argument's name (before: only workers, prefetch and
    pinning were read, so an order of persistent workers or out-of-order batches passed unseen)."""
    assert set(ORDERED_AWAY) == set(BY_NAME), "a new argument in the table needs its case here"
    data = TensorDataset(torch.zeros(8, 2))
    iterated = DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context="fork")
    epoch = iter(iterated)
    next(epoch)  # its worker has started
    started = [(weakref.ref(iterated), weakref.ref(epoch))]
    same = DataLoader(data, batch_size=2, num_workers=1)
    assert unmet(promised(iterated, same), data, started) is None
    for name, value in ORDERED_AWAY.items():
        asked = {name: value} if BY_NAME[name].keyword else {"worker_init_fn": worker_init({name: value}, None)}
        ordered = DataLoader(data, batch_size=2, **{"num_workers": 1, **asked})
        said = unmet(promised(iterated, ordered), data, started)
        assert said is not None and said.startswith(f"{name}={value!r} was ordered"), (name, said)
    del epoch


SCRIPT = """
import os, sys, time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Lazy(Dataset):  # opens its file at its first read, as h5py and LMDB datasets do; says who opened it
    def __init__(self):
        self.file, self.opener = None, None
    def __len__(self):
        return 32
    def __getitem__(self, i):
        if self.file is None:
            self.file, self.opener = open(sys.argv[0], "rb"), os.getpid()
        with open("reads", "a") as out:
            out.write(f"{os.getpid()} {self.opener}\\n")
        time.sleep(0.002)
        return torch.full((4,), float(i))

class Batches:  # holds its loader as .loader; with `own`, iterates a reference of its own the order cannot swap
    def __init__(self, loader):
        self.loader, self._mine = loader, loader
    def __iter__(self):
        return iter(self._mine if sys.argv[1] == "own" else self.loader)
    def __len__(self):
        return len(self.loader)

batches = Batches(DataLoader(Lazy(), batch_size=8, num_workers=2))
for epoch in range(100):
    for x in wif.watch(batches):
        pass
"""
W2 = {"num_workers": 2, "prefetch_factor": 2, "pin_memory": False, "persistent_workers": False, "in_order": True}


class Trials:
    """Loader-only trials of SCRIPT, each with its own run in a real store."""

    def __init__(self, tmp_path: Path, store: str) -> None:
        (tmp_path / "train.py").write_text(SCRIPT)
        self.client = MlflowClient(store)
        self.exp, self.store = self.client.create_experiment("who_is_faster"), store

    def orders(self, loader: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        run_id = self.client.create_run(self.exp).info.run_id
        spec = {"uri": self.store, "experiment": "who_is_faster", "run_id": run_id, "mode": "loader_only"}
        return {**spec, "batches": 4, "epochs": 2, **({"loader": loader} if loader else {})}

    def metrics(self, orders: Dict[str, Any]) -> Dict[str, float]:
        return self.client.get_run(orders["run_id"]).data.metrics


@pytest.fixture
def trials(tmp_path: Path, store: str, monkeypatch) -> Trials:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WIF_ADVISE_WARM", "0")
    return Trials(tmp_path, store)


def test_an_order_of_persistent_workers_alone_is_proven(trials: Trials) -> None:
    """The script's loader has 2 workers; only persistent_workers is ordered. Where the loop iterates a reference
    the order cannot swap, the script ends with the one line and the trial has no figure (before, workers and
    prefetch matched, and the script's own setting was timed as persistent); where the order reaches the loader,
    both epochs are proven and recorded, the second on the iterator its persistent workers kept."""
    unreached = trials.orders({**W2, "persistent_workers": True})
    rc, last, _ = Served([sys.executable, "train.py", "own"]).measure(unreached, "own.log", timeout=300)
    said = f"wif.watch: {UNREACHED}: persistent_workers=True was ordered, the DataLoader iterated has False"
    assert rc != 0 and last == said, last
    assert names.EPOCH_TIME_S not in trials.metrics(unreached)
    reached = trials.orders({**W2, "persistent_workers": True})
    served = Served([sys.executable, "train.py", "swapped"])
    rc, last, _ = served.measure(reached, "swapped.log", timeout=300)
    served.close()
    metrics = trials.metrics(reached)
    assert rc == 0 and metrics[names.EPOCHS_RUN] == 2 and metrics["workers_peak"] == 2, (last, metrics)


def test_a_trial_at_0_workers_is_its_processs_last(trials: Trials) -> None:
    """w0, then the script's own 2 workers: the w0 trial's dataset opens its file in the main process, so the next
    trial runs in a new one, and no worker reads through a handle another process opened (before, w2's workers
    forked from the process that w0 had opened it in, and inherited its handle)."""
    served = Served([sys.executable, "train.py", "swapped"])
    w0 = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "persistent_workers": False}
    first, second = trials.orders({**w0, "in_order": True}), trials.orders(None)
    rc, last, _ = served.measure(first, "w0.log", timeout=300, in_process=True)
    assert rc == 0 and served.proc is None, last
    rc, last, _ = served.measure(second, "w2.log", timeout=300)
    served.close()
    assert rc == 0 and trials.metrics(second)[names.EPOCHS_RUN] == 2, last
    reads = {tuple(line.split()) for line in Path("reads").read_text().splitlines()}  # (reader, opener) pids
    assert len(reads) > 2 and all(pid == opener for pid, opener in reads), sorted(reads)  # w0's and the workers
