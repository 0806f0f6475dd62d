"""Windows, not epochs (NOTE [ Windows ] in wif.watcher.windows): a script of one long epoch, a step-based
loop over an endless stream, and one that leaves after `max_steps` are measured in windows of batches, by
the watch alone and under wif-advise's orders. Real scripts in subprocesses, a real SQLite store. wif-advise
on such scripts, to its pick: tests/test_windows_advise.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import SideBySide, new_store, selected_cases
from wif.advisor.answer import whole_epoch
from wif.measure import names
from wif.watcher.orders import ENV, Orders

ROOT = Path(__file__).resolve().parents[1]
STREAM = """
import sys, time, torch, wif
from torch.utils.data import DataLoader, IterableDataset

class Endless(IterableDataset):  # no len(), never ends: each batch waits 20 ms
    def __iter__(self):
        i = 0
        while True:
            time.sleep(0.02)
            yield torch.full((4,), float(i))
            i += 1

loader = DataLoader(Endless(), batch_size=None)
"""
ONE_EPOCH = """
import sys, time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # 92 items that wait 2 ms each: one epoch of 23 batches
    def __len__(self):
        return 92
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i))

for x in wif.watch(DataLoader(Slow(), batch_size=4)):
    pass
print("the script's own end", flush=True)
"""


def run(tmp_path: Path, source: str, store: str, orders: dict | None = None, **env: str):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    environ = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), **env}
    environ.pop(ENV, None)
    if orders is not None:
        environ[ENV] = json.dumps(orders)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environ, capture_output=True, text=True)


def history(client: MlflowClient, run_id: str, key: str) -> list:
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def in_a_folder(factory: pytest.TempPathFactory, source: str, orders: dict | None = None, **env: str):
    """`source` to be run in a folder and store of its own, under `orders` (their keys beyond the run's; the
    run made for them) or by the watch alone: its result, the store's client, and the orders."""
    work = factory.mktemp("windows")
    store = new_store(work)
    client = MlflowClient(store)
    given = None if orders is None else orders_for(client, store, **orders)
    return lambda: (run(work, source, store, given, **env), client, given)


@pytest.fixture(scope="module")
def scripts(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, side_by_side: SideBySide
) -> SideBySide:
    """The selected scripts whose figures are counts and sums, never compared with a clock, a few at once:
    each pays seconds of importing torch and MLflow (one after another, a minute of this module)."""
    leaves = STREAM + "for step, x in enumerate(wif.watch(loader)):\n    if step == 60:\n        break\n"
    cases = {  # test: {key: (source, orders, environment)}
        "test_the_watch_alone_says_and_logs_an_endless_stream_window_by_window": {
            "alone": (leaves, None, {"WIF_WATCH_WINDOW_S": "0.3"}),
            "bad": (leaves, None, {"WIF_WATCH_WINDOW_S": "soon"}),
        },
        "test_orders_measure_one_epoch_in_windows_and_leave_within_it": {
            "3 windows": (ONE_EPOCH, {"batches": 5, "epochs": 3}, {}),
            "9 windows": (ONE_EPOCH, {"batches": 5, "epochs": 9}, {}),
        },
        "test_a_cut_epoch_pays_its_start_once_per_the_scripts_epoch": {"cut": (CUT, {"batches": 4, "epochs": 4}, {})},
        "test_orders_on_a_stream_log_that_it_has_no_epoch": {
            "stream": (STREAM + "for x in wif.watch(loader):\n    pass\n", {"batches": 4, "epochs": 3}, {})
        },
    }
    for test, commands in cases.items():
        if selected_cases(request, test):
            for key, (source, orders, env) in commands.items():
                side_by_side.start(key, in_a_folder(tmp_path_factory, source, orders, **env))
    return side_by_side


def test_the_orders_cut_an_epoch_to_whole_windows() -> None:
    """An epoch of at most one window runs whole; a longer one stops at its last whole window; a stream
    without a length is never cut."""
    orders = Orders({"uri": "", "run_id": None, "mode": "train", "batches": 50, "epochs": 3})
    assert [orders.cut(n) for n in (None, 30, 50, 94, 150, 10_001)] == [None, 30, 50, 50, 150, 10_000]


def test_the_watch_alone_says_and_logs_an_endless_stream_window_by_window(scripts: SideBySide) -> None:
    """A step-based loop over an endless stream, leaving after 60 steps: before, its one epoch was said and
    logged once, at the break; now a window every WIF_WATCH_WINDOW_S seconds, each counted."""
    done, client, _ = scripts.result("alone")
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("wif.watch: window")]
    assert len(said) >= 3 and all("(epoch 1)" in line for line in said), done.stderr[-2000:]
    (watched,) = client.search_runs([client.get_experiment_by_name("who_is_faster").experiment_id])
    run_id = watched.info.run_id
    assert history(client, run_id, names.WINDOWED) == [1.0] * len(said)
    assert sum(history(client, run_id, "batches")) <= 61  # the break's batch, taken and not stepped, at most
    assert watched.data.metrics[names.SCRIPT_EPOCHS] == 1 and watched.data.metrics[names.SCRIPT_BATCHES] == 61
    bad = scripts.result("bad")[0]
    assert bad.returncode == 0 and "WIF_WATCH_WINDOW_S='soon' is not seconds above 0" in bad.stderr


def test_orders_measure_one_epoch_in_windows_and_leave_within_it(scripts: SideBySide) -> None:
    """Orders for 3 windows of 5 batches, a script of one epoch of 23: it leaves after its third window,
    within its epoch (before: the epoch was capped at 5 batches, and the script ended after one)."""
    done, client, orders = scripts.result("3 windows")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the script's own end" not in done.stdout  # left within the epoch
    assert history(client, orders["run_id"], "batches") == [5.0] * 3
    assert history(client, orders["run_id"], names.WINDOWED) == [1.0] * 3
    # asked for more windows than the epoch holds: 4 whole ones (20 of 23 batches), then the script's own end
    done, client, orders = scripts.result("9 windows")
    assert done.returncode == 0 and "the script's own end" in done.stdout, done.stderr[-2000:]
    assert history(client, orders["run_id"], "batches") == [5.0] * 4
    metrics = client.get_run(orders["run_id"]).data.metrics
    assert metrics[names.SCRIPT_EPOCHS] == 1 and metrics[names.SCRIPT_BATCHES] == 23  # offered: the epoch uncut
    assert names.SCRIPT_STREAM not in metrics  # it has a length: no line on what a stream's figures assume


# NOTE [ A window times the script's own run ] in wif.watcher.windows: the three scripts below run under orders.
PACED = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
import wif

class Paced(Dataset):  # one epoch of 15 batches of 1 item, each waiting 100 ms at 0 workers
    def __len__(self):
        return 15
    def __getitem__(self, i):
        time.sleep(0.1)
        return torch.full((4,), float(i))

waits, t = [], None
for x in wif.watch(DataLoader(Paced(), batch_size=1)):
    if t is not None:
        waits.append(time.perf_counter() - t)  # the loop's own wait for this batch
    t = time.perf_counter()
print("WAITS", *waits, file=sys.stderr, flush=True)
"""
CUT = """
import time, torch
from torch.utils.data import DataLoader, Dataset
import wif

class Items(Dataset):  # epochs of 10 batches of 2 items that wait 5 ms
    def __len__(self):
        return 20
    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((4,), float(i))

loader = DataLoader(Items(), batch_size=2, num_workers=2, persistent_workers=False)  # started every epoch
for epoch in range(3):
    for x in wif.watch(loader):
        pass
"""


def orders_for(client: MlflowClient, store: str, **spec) -> dict:
    run_id = client.create_run(client.create_experiment("who_is_faster")).info.run_id  # one run a store
    return {"uri": store, "experiment": "who_is_faster", "run_id": run_id, "mode": "train", **spec}


def test_windows_of_one_epoch_follow_each_other_at_once(tmp_path: Path, store: str) -> None:
    """Between two windows of an epoch the loop waits no longer than for a batch of its own: nothing but the
    clock and the stopping rule runs there (before: the MLflow run opened there, 14.7 s on a loaded CPU, while
    4 workers filled their queue of 16 batches). The windows are logged once the epoch is over."""
    client = MlflowClient(store)
    orders = orders_for(client, store, batches=3, epochs=9)  # more windows than the epoch's 5: the loop goes on
    done = run(tmp_path, PACED, store, orders)
    assert done.returncode == 0, done.stderr[-2000:]
    assert history(client, orders["run_id"], "batches") == [3.0] * 5
    waits = [float(w) for w in done.stderr.split("WAITS")[1].split()]  # waits[k]: batch k + 1's
    starts = [waits[k - 1] for k in (3, 6, 9, 12)]  # the first batch of windows 2-5
    batch = sorted(waits)[len(waits) // 2]
    assert max(starts) - batch < 0.5 * batch, (starts, batch)


def test_a_cut_epoch_pays_its_start_once_per_the_scripts_epoch(scripts: SideBySide) -> None:
    """Epochs of 10 batches, 2 workers started every epoch, cut to 8 in windows of 4: each window's figure
    carries start x 4 / 10 of its epoch's start, the first window's wait beyond a steady batch's (before: the
    first window carried it whole, the second none)."""
    done, client, orders = scripts.result("cut")
    assert done.returncode == 0, done.stderr[-2000:]
    figure, raw, start, epoch = (
        history(client, orders["run_id"], key)
        for key in (names.EPOCH_TIME_S, names.WINDOW_TIME_S, names.EPOCH_START_S, names.SCRIPT_EPOCH)
    )
    assert epoch == [0.0, 0.0, 1.0, 1.0] and start[0] == start[1] and start[2] == start[3] and min(start) > 0
    for k in range(4):
        paid = start[k] if k % 2 == 0 else 0.0  # each epoch's first window paid it
        assert figure[k] == pytest.approx(raw[k] - paid + start[k] * 4 / 10, abs=1e-9)


def test_the_bound_leaves_its_copies_out_of_the_wait(tmp_path: Path, store: str) -> None:
    """The bound's replays hand the step a copy of each kept batch, made in the loop's next(): its time is
    left out of the window and of its wait, as no loader makes it (before: it was the bound's data wait)."""
    body = ONE_EPOCH.replace("torch.full((4,), float(i))", "torch.full((1024, 1024), float(i))")
    body = body.replace("for x in wif.watch(", "for epoch in range(3):\n  for x in wif.watch(")
    client = MlflowClient(store)
    orders = orders_for(client, store, mode="bound", batches=23, epochs=3)
    done = run(tmp_path, body, store, orders)
    assert done.returncode == 0, done.stderr[-2000:]
    figure, raw, wait = (
        history(client, orders["run_id"], key) for key in (names.EPOCH_TIME_S, names.WINDOW_TIME_S, names.DATA_WAIT_S)
    )
    copied = [r - f for r, f in zip(raw, figure)]  # an uncut epoch: the copies alone are left out
    assert all(c > 0 for c in copied) and all(w < c for w, c in zip(wait[1:], copied[1:])), (copied, wait)


def test_orders_on_a_stream_log_that_it_has_no_epoch(scripts: SideBySide) -> None:
    """An endless stream has no epoch to spread its start over: its windows' figures are their clocks, and the
    run says it was a stream, for wif-advise's line on what its figures assume."""
    done, client, orders = scripts.result("stream")
    assert done.returncode == 0, done.stderr[-2000:]
    assert client.get_run(orders["run_id"]).data.metrics[names.SCRIPT_STREAM] == 1.0
    raw = history(client, orders["run_id"], names.WINDOW_TIME_S)
    assert len(raw) == 3 and history(client, orders["run_id"], names.EPOCH_TIME_S) == raw


EVALUATES = """
import time, torch, wif
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # 16 items that wait 2 ms each: epochs of 4 batches
    def __len__(self):
        return 16
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((4,), float(i))

loader = DataLoader(Slow(), batch_size=4)
for epoch in range(3):
    for x in wif.watch(loader):
        pass
    time.sleep(0.3)  # the script's evaluation and saving, outside its training loader
"""


def test_the_scripts_time_between_its_epochs_is_logged_and_counted_in_the_speedup(tmp_path: Path, store: str) -> None:
    """Under orders the watch logs the script's own time from one epoch's end to the next one's start, its
    figures sent first (0.3 s here). A pick's speedup adds a window's share of it to both sides: a loader 4x
    faster over epochs of 1 s with 0.3 s outside them is 2.6x faster over the script's whole epoch."""
    client = MlflowClient(store)
    run_id = client.create_run(client.create_experiment("who_is_faster")).info.run_id
    orders = {"uri": store, "experiment": "who_is_faster", "run_id": run_id, "mode": "train", "batches": 50}
    done = run(tmp_path, EVALUATES, store, {**orders, "epochs": 3})
    assert done.returncode == 0, done.stderr[-2000:]
    between = client.get_run(run_id).data.metrics[names.BETWEEN_EPOCHS_S]
    assert 0.3 <= between < 0.6, between  # the sleep, and what the loop does around it on a loaded machine
    estimate, low, high = whole_epoch((4.0, 2.0, 8.0), current_s=1.0, outside_s=0.3)
    assert estimate == pytest.approx(1.3 / 0.55) and low == pytest.approx(1.3 / 0.8) and high < 1.3 / 0.3
