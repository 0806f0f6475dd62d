"""`wif.watch` in loops as people write them, each a real script in a subprocess on a real SQLite store: a
new tqdm, generator or DataLoader every epoch is one watch; a loop that leaves its epochs early still ends a
measurement where it should; a store that cannot be written never ends the training; and the settings read
off a DataLoader with its own batch sampler."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, TensorDataset

from wif.watcher.found import anchor_of, find_dataloader, settings_of
from wif.watcher.orders import ENV, Orders
from wif.watcher.record import redacted

ROOT = Path(__file__).resolve().parents[1]
HEAD = """
import sys, time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # items that wait 2 ms, as a read from storage does
    def __len__(self):
        return 96
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i)), i % 2

data = Slow()
loader = DataLoader(data, batch_size=16)
"""


def run(tmp_path: Path, body: str, store: str, orders: Optional[dict] = None, timeout: float = 300):
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop(ENV, None)
    if orders is not None:
        env[ENV] = json.dumps(orders)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def watch_runs(store: str) -> list:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'watch'")


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
    done = run(tmp_path, LOOPS, store)
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
    done = run(tmp_path, body, store, orders)
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
    done = run(tmp_path, body, f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["trained", "0", "trained", "1", "trained", "2"]
    said = [line for line in done.stderr.splitlines() if "cannot be written" in line]
    assert len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


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
    done = run(tmp_path, body, store, {"uri": "", "run_id": None, "mode": "probe", "out": str(out)})
    assert done.returncode == 0, done.stderr[-2000:]
    probed = json.loads(out.read_text())
    assert probed["dataset"] == "Slow" and probed["batch_size"] == 16 and probed["has_dataloader"]


class Pairs(Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int):
        return torch.zeros(2), i


class Uneven:
    """A batch sampler of its own, with no batch_size: batches of 10 and 15 alternating (100 items, 8 batches)."""

    def __iter__(self):
        starts = [0, 10, 25, 35, 50, 60, 75, 85, 100]
        for a, b in zip(starts, starts[1:]):
            yield list(range(a, b))

    def __len__(self) -> int:
        return 8


def test_a_batch_samplers_batches_are_priced_at_their_size() -> None:
    """Before, a DataLoader given batch_sampler= reported batch_size None, and wif-advise priced batches of 1."""
    data = Pairs()
    fixed = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 16, drop_last=False))
    assert settings_of(fixed, fixed)["batch_size"] == 16
    own = DataLoader(data, batch_sampler=Uneven())
    assert settings_of(own, own)["batch_size"] == round(100 / 8)  # the mean batch over an epoch
    assert settings_of(data, DataLoader(data, batch_size=None))["batch_size"] is None  # each item a batch


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.zeros(40, 2))


def test_the_loader_is_found_in_a_tqdm_a_generator_and_lengthless_data_is_capped() -> None:
    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)

    def over(dl: DataLoader):
        yield from dl

    gen = over(loader)
    assert find_dataloader(gen) == (gen, "", loader)  # found, but a generator's local cannot be swapped
    assert anchor_of(gen) is anchor_of(loader) is loader.dataset
    pytest.importorskip("tqdm")
    from tqdm import tqdm

    bar = tqdm(loader, disable=True)
    assert find_dataloader(bar) == (bar, "iterable", loader)
    orders = Orders({"uri": "", "run_id": None, "mode": "train", "batches": 5, "epochs": 2})
    assert orders.length(DataLoader(Stream(), batch_size=4)) == 5  # no len(): the cap is the length


class Items(IterableDataset):
    """40 items; `sharded`: each worker yields its own share, as torch's docs ask of an IterableDataset."""

    def __init__(self, sharded: bool) -> None:
        self.sharded = sharded

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        step, start = (info.num_workers, info.id) if self.sharded and info is not None else (1, 0)
        return iter([torch.tensor([float(i)]) for i in range(start, 40, step)])


@pytest.mark.parametrize("sharded", [False, True])
def test_an_iterable_dataset_that_does_not_shard_is_not_timed_with_workers(sharded: bool) -> None:
    """Moved from 0 to 2 workers, an IterableDataset that ignores get_worker_info() yields every item twice:
    the measurement ends saying so (before: its candidates were timed, and picked, on duplicated data)."""
    loader = DataLoader(Items(sharded), batch_size=4)
    orders = Orders(
        {"uri": "", "run_id": None, "mode": "loader_only", "batches": 6, "epochs": 1, "loader": {"num_workers": 2}}
    )
    orders.take(loader, find_dataloader(loader))
    if sharded:  # not cut: a stream without a length runs on, window after window (NOTE [ Windows ])
        got = sorted(float(v) for batch in orders.batches(loader, 0) for v in batch.flatten())
        assert got == [float(i) for i in range(40)]
        return
    with pytest.raises(SystemExit, match="Items does not split its items among DataLoader workers"):
        list(orders.batches(loader, 0))


class Placed(DataLoader):
    """A framework's own DataLoader, as accelerate's DataLoaderShard: state of its own, batches it changes."""

    def __init__(self, *args, device: str = "cpu", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.device = device

    def __iter__(self):
        for batch in super().__iter__():
            yield self.device, batch


def test_a_frameworks_dataloader_is_rebuilt_as_itself() -> None:
    """Before, the rebuilt loader was a plain DataLoader: accelerate's batches lost their device placement and
    the race's runs crashed where the loader-only trials passed."""
    from wif.watcher.found import rebuild

    loader = Placed(TensorDataset(torch.arange(8.0)), batch_size=2, device="cuda:7")
    again = rebuild(loader, {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4})
    assert type(again) is Placed and again.device == "cuda:7" and again.dataset is loader.dataset
    assert (again.num_workers, again.persistent_workers, again.prefetch_factor) == (2, True, 4)
    got = list(again)
    assert [device for device, _ in got] == ["cuda:7"] * 4
    assert sorted(float(v) for _, (x,) in got for v in x) == [float(i) for i in range(8)]
    assert loader.num_workers == 0 and not loader.persistent_workers  # the script's own, untouched


def test_the_bound_hands_each_replay_its_own_batch() -> None:
    """A step that normalizes its batch in place, or pops a key, sees the same batch at every replay (before,
    the replay handed it the objects the step had changed)."""
    from wif.watcher.replay import Keep, Replay

    kept: list = []
    (first,) = list(Keep([{"x": torch.ones(2), "y": torch.zeros(2)}], kept, window=8, count=1))
    first["x"].mul_(0)  # the step of the first epoch normalizes in place
    for _ in range(3):
        (batch,) = list(Replay(kept, 1))
        assert batch["x"].tolist() == [1.0, 1.0] and "y" in batch
        batch.pop("y")  # the step pops a key


def test_the_bound_of_one_long_epoch_replays_after_its_first_window() -> None:
    """A script of one epoch, or an endless stream, has no second epoch to replay: the bound reads its first
    window from the loader and replays the kept batches for the rest of the epoch (before: it read them all)."""
    from wif.watcher.replay import Keep

    read = []
    source = (read.append(i) or torch.tensor([float(i)]) for i in range(100))
    kept: list = []
    got = [float(b) for b in itertools.islice(Keep(source, kept, window=3, count=None), 10)]
    assert read == [0, 1, 2] and got == [0.0, 1.0, 2.0] * 3 + [0.0]
    short: list = []  # an epoch that ends within its first window: nothing replayed after it
    assert [float(b) for b in Keep([torch.tensor([5.0])], short, window=3, count=None)] == [5.0]


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


def test_secrets_in_the_command_line_are_not_logged() -> None:
    argv = ["train.py", "--hf-token", "abc", "--api_key=xyz", "WANDB_API_KEY=k", "--lr", "0.1", "--tokenizer=t5"]
    assert redacted(argv) == [
        "train.py",
        "--hf-token",
        "***",
        "--api_key=***",
        "WANDB_API_KEY=***",
        "--lr",
        "0.1",
        "--tokenizer=t5",
    ]


DDP = """
import os, sys, time, torch, torch.distributed as dist, wif
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
rank = dist.get_rank()
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
    rank's, and each rank's beside them (before: both ranks wrote their own figures into the one run)."""
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
    assert len([line for line in done.stderr.splitlines() if line.startswith("wif.watch: epoch")]) == 3  # rank 0's
    run = client.get_run(run_id)
    m = run.data.metrics
    # DDP's all-reduce makes the fast rank wait for the slow one in its step: either can be the slowest by a hair
    assert m["slowest_rank"] in (0.0, 1.0) and {"rank0_compute_s", "rank1_compute_s"} <= set(m)
    assert m["epoch_time_s"] == pytest.approx(max(m["rank0_epoch_time_s"], m["rank1_epoch_time_s"]))
    history = client.get_metric_history(run_id, "epoch_time_s")
    assert sorted(h.step for h in history) == [0, 1, 2] and run.data.tags["wif.stop_reason"] == "3 epochs (fixed)"
