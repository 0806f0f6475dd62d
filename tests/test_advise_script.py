"""`wif-advise -- python my_train.py ARGS...`: the user's own script advised under wif.watch, run for real in
subprocesses on a real SQLite store. The probe times the first batches and ends a script that leaves each
epoch early; an order that cannot reach the loader is said; a sleeping Dataset at 0 workers is data-bound and a
worker setting is raced; a compute-bound script is not. Where the advice ends short:
tests/test_advise_script_ends.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
from mlflow.tracking import MlflowClient

from tests.advising import ROOT, SCRIPT, advise, advise_env, in_a_folder, runs
from tests.conftest import SideBySide, holds_unless_disturbed, new_store, selected_cases, selected_params


def probing(works: List[Path], source: str, args: List[str]) -> Callable[[], List[Dict[str, Any]]]:
    """`source` written as train.py in each folder of `works`, to be probed there with its `args` as wif-advise
    probes it (wif.advisor.script.mode.probe), all from one process: what each probe found."""
    for work in works:
        (work / "train.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "WIF_WATCH_ORDERS"}
    code = (
        "import json, os, sys; from wif.advisor.script.mode import probe\n"
        "for work, arg in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    os.chdir(work); print('PROBED', json.dumps(probe([sys.executable, 'train.py', arg])), flush=True)\n"
    )
    pairs = [str(x) for work, arg in zip(works, args) for x in (work, arg)]

    def run() -> List[Dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-c", code, *pairs],
            env={**env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("PROBED ")]

    return run


@pytest.fixture(scope="module")
def side_commands(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, side_by_side: SideBySide
) -> SideBySide:
    """The selected commands that time nothing, at once: the advice of a loop the orders cannot reach, and the
    probes of scripts that leave each epoch early. Each pays seconds of importing torch and MLflow."""
    if selected_cases(request, "test_an_order_that_cannot_reach_the_loader_is_said_and_has_no_figure"):
        argv = ("--minutes", "1.5", "--epochs", "2", "--max-workers", "4", "measure.contended_pct=1000")
        side_by_side.start("unreachable", in_a_folder(tmp_path_factory, UNREACHABLE, "train.py", "40", options=argv))
    hows = selected_params(request, "test_the_probe_ends_a_script_that_leaves_each_epoch_early", "how")
    if hows:  # one process probes each: its imports paid once
        works = [tmp_path_factory.mktemp("early") for _ in hows]
        run = probing(works, EARLY_LEAVER, hows)
        side_by_side.start("early", lambda: dict(zip(hows, zip(run(), works))))
    return side_by_side


PREPARED = (
    "import json, sys\nfrom wif.advisor.script.mode import prepare\nfrom wif.advisor.candidates import script_extras, "
    "workers\nfrom wif.measure.nvml import resolve_device\n"
    "advice = prepare(['device=auto'], [sys.executable, 'train.py', *sys.argv[1:]])\n"
    "cuda = resolve_device(advice.base.device) == 'cuda'\n"
    "made = script_extras(advice.base, workers(advice.base, 4, cuda), cuda, None, 8)\n"
    "print(json.dumps([advice.probed, advice.base.device.value, [c.name for c in made]]))\n"
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> List[Any]:
    """SCRIPT's batches of 0.3 s of step, prepared as wif-advise prepares it (wif.advisor.script.mode.prepare,
    the probe within it), alone: what it probed, the device of the advice, and the extra trials it would make."""
    work = tmp_path_factory.mktemp("prepared")
    (work / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-c", PREPARED, "40", "0.3"],
        cwd=work,
        env=advise_env(new_store(work), WIF_ADVISE_WARM="0"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.alone
def test_the_probe_times_the_first_batches_and_slow_batches_get_fewer_an_epoch(prepared: List[Any]) -> None:
    """The probe runs the script's first batches, each 0.3 s of step here, and reports their median; with
    batches that slow an epoch gets fewer of them (at least 16), so that the race fits in the minutes."""
    from wif.advisor.script.mode import sized_cap

    found = prepared[0]
    assert found["batch_size"] == 2 and 0.3 <= found["batch_s"] < 0.6, found
    assert sized_cap(50, 0.01, 5.0) == 50  # fast batches: --batches as given
    assert sized_cap(50, 0.5, 5.0) == 16  # 20-s epochs of 40 batches: 8 s ones, a race within 5 minutes
    assert sized_cap(50, 0.2, 5.0) == 33
    assert sized_cap(8, 2.0, 5.0) == 8 and sized_cap(50, None, 5.0) == 50


@pytest.mark.alone  # it reads the alone probe's run: no time of its own
def test_a_step_on_the_cpu_is_advised_for_the_cpu_and_gets_no_pin_trial(prepared: List[Any]) -> None:
    """The probe says where the step runs: on the CPU, where the script never started CUDA by its first
    epoch. The advice is then for the CPU whatever the machine has, so no pin_memory trial is made."""
    found, device, made = prepared
    assert [found["step_device"], device] == ["cpu", "cpu"] and not [n for n in made if n.endswith("-pin")], prepared


UNREACHABLE = """
import sys, time, torch, wif
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((2,), float(i))
class Batches:  # holds its loader as .loader, but iterates a reference of its own: an order swaps .loader only
    def __init__(self, loader):
        self.loader, self._mine = loader, loader
    def __iter__(self):
        return iter(self._mine)
    def __len__(self):
        return len(self._mine)
batches = Batches(DataLoader(Slow(), batch_size=4))
for epoch in range(int(sys.argv[1])):
    for x in wif.watch(batches):
        time.sleep(0.001)
"""


@pytest.mark.slow
def test_an_order_that_cannot_reach_the_loader_is_said_and_has_no_figure(side_commands: SideBySide) -> None:
    """The loop iterates a DataLoader the order does not replace: each worker trial would time 0 workers
    under its name. The trial says so in one line; no worker setting has a figure, a race or a pick."""
    done, store = side_commands.result("unreachable")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    said = "the order did not reach the loader: num_workers=4 was ordered, the DataLoader iterated has 0"
    trials = [line for line in out.splitlines() if line.startswith("  loader only")]
    assert trials and said in trials[0] and not [t for t in trials if "img/s" in t], out[-3000:]
    assert not [line for line in out.splitlines() if re.match(r"w\d", line)], out[-3000:]  # no row in the tables
    assert f"Keep what you have: {said}" in out and "Pick:" not in out, out[-3000:]
    tried = [r for r in runs(store) if r.data.tags["wif.advise_role"] in ("loader", "race")]
    assert tried and all(r.info.status == "FAILED" and "epoch_time_s" not in r.data.metrics for r in tried)


EARLY_LEAVER = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.zeros(40, 2)), batch_size=2)
for epoch in range(1000):
    with open("epochs", "a") as out:
        out.write("started\\n")
    if sys.argv[1] == "break":  # a per-epoch step limit: each epoch left after 3 batches
        for i, (x,) in enumerate(__import__("wif").watch(loader)):
            time.sleep(0.02)
            if i == 2:
                break
    else:  # as Lightning's fetcher does: an epoch's batches taken by count, the end never asked for; no wif line
        batches = iter(loader)
        for _ in range(3):
            next(batches)
            time.sleep(0.02)
"""


@pytest.mark.parametrize("how", ["break", "by-count"])
def test_the_probe_ends_a_script_that_leaves_each_epoch_early(side_commands: SideBySide, how: str) -> None:
    """Epochs of 3 batches taken, fewer than the probe times: the probe ends the script as its second epoch
    starts, its batch time kept (before: the probe ran every one of the script's 1,000 epochs)."""
    found, work = side_commands.result("early")[how]
    assert found["batch_size"] == 2 and 0.02 <= found["batch_s"] < 0.5, found
    assert (work / "epochs").read_text().split() == ["started", "started"]


def test_the_trials_leave_the_race_its_time() -> None:
    """Within `keeping`, a trial that would run into the race's time is not started, and says why; after it the
    race has the whole deadline again. The smallest race is priced from the measuring run: 2 blocks of 2 runs,
    each its start (wall time less its epochs) and 3 epochs at 1.3x the measured one, with half an epoch to spare."""
    from wif.advisor.advice import MIN_RACE_EPOCHS, Options, race_epochs, race_reserve_s
    from wif.advisor.runner import FINISHED, SKIPPED, Measured, Recording
    from wif.advisor.script.runner import ScriptRunner

    now = Measured("measure", "current", "id", FINISHED, {}, epochs=[{"epoch_time_s": t} for t in (3.0, 1.0, 1.0)])
    now.wall_s = 12.0  # 7 s of start beside 5 s of epochs
    assert race_reserve_s(now, Options(min_blocks=2)) == pytest.approx(2 * 2 * (7.0 + 3.5 * 1.3))
    assert race_reserve_s(now, Options(min_blocks=3)) == pytest.approx(3 * 2 * (7.0 + 3.5 * 1.3))
    # the seconds between the last trial and the race do not cut its runs below the smallest race
    kept = race_reserve_s(now, Options(min_blocks=2))
    assert race_epochs(kept - 2.0, now, predicted_s=[0.5], opts=Options(min_blocks=2)) == MIN_RACE_EPOCHS
    # too little left for both: the first trial (its start and 2 epochs) runs, and the rest is kept
    assert race_reserve_s(now, Options(min_blocks=2), left_s=20.0) == pytest.approx(20.0 - (7.0 + 2 * 1.0))
    assert race_reserve_s(now, Options(min_blocks=2), left_s=5.0) == 0.0
    recording = Recording(tracker=None, device="cpu", parent_id="parent", advise_id="advise")
    runner = ScriptRunner(recording, deadline=time.monotonic() + 60, command=["python", "train.py"])
    with runner.keeping(59.2):
        assert runner.left_s() < 1
        m = runner.run(None, "loader", "w16")  # none is started: no configuration or store is touched
    assert m.status == SKIPPED and "59 s kept for the race" in m.error and runner.runs == []
    assert runner.left_s() > 50


@pytest.mark.alone
@pytest.mark.slow
def test_a_sleeping_dataset_at_0_workers_gets_workers_raced(tmp_path: Path, store: str) -> None:
    """The loop as people write it: a new tqdm bar each epoch, and a per-epoch step limit that leaves each
    epoch after 4 of its 6 batches. Every measuring run times the epochs it was asked for (before, the
    second epoch's tqdm was an unwatched loop and the break escaped the orders: runs went uncapped)."""
    options = ("--minutes", "3", "--epochs", "2", "--race-candidates", "1", "--max-epochs", "6")
    script = ("--epochs", "40", "--n-train", "192", "--batch-size", "32", "--tqdm", "--max-steps", "4")
    command = (sys.executable, "-m", "examples.train_slow_reads", *script)
    # w4 the widest trial on any machine, as on CI's 2 cores
    done = advise(tmp_path, store, *options, "--max-workers", "4", "measure.contended_pct=1000", "--", *command)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out[-3000:]
    found = runs(store)
    assert all(r.info.status == "FINISHED" for r in found)
    holds_unless_disturbed("Data-bound" in out, found, "a dataset that sleeps 4 ms an item is data-bound")
    assert "predicted s" in out and "measured s" in out
    holds_unless_disturbed("Pick: w" in out, found, "workers overlap the sleeps: a worker setting is picked")
    assert "In your script: DataLoader(<your dataset and other arguments>, num_workers=" in out
    roles = {r.data.tags["wif.advise_role"] for r in found}
    assert roles == {"parent", "measure", "bound", "loader", "race"}
    for r in found:
        if r.data.tags["wif.advise_role"] in ("measure", "bound", "race"):
            assert r.data.metrics["epochs_run"] >= 2, r.info.run_name  # a warm-up and a measured epoch at least
            batches = MlflowClient(store).get_metric_history(r.info.run_id, "batches")
            # the loop's own break, every epoch: 4 steps, and the fifth batch it took before it left
            assert {m.value for m in batches} == {5.0}, r.info.run_name
    w4 = [r for r in found if r.data.tags["wif.advise_role"] == "loader" and r.data.params["loader.num_workers"] == "4"]
    assert w4 and all(r.data.metrics["workers_peak"] == 4 for r in w4)  # the script's DataLoader, rebuilt with 4
    trials = [r for r in found if r.data.tags["wif.advise_role"] == "loader"]
    assert len(trials) >= 2 and len({r.data.tags["wif.script_log"] for r in trials}) == 1  # one process for all


@pytest.mark.alone
@pytest.mark.slow
def test_a_compute_bound_script_is_not_data_bound(tmp_path: Path, store: str) -> None:
    """A conv net on batches already in memory: the step hardly waits, so no loader setting is raced or picked."""
    script = ("--epochs", "40", "--n-train", "32", "--batch-size", "16")  # epochs of two batches, each a step's work
    command = (sys.executable, "-m", "examples.train_compute_bound", *script)
    done = advise(tmp_path, store, "--minutes", "3", "--epochs", "2", "measure.contended_pct=1000", "--", *command)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "Not data-bound" in done.stdout and "Keep what you have" in done.stdout, done.stdout
    assert all(r.info.status == "FINISHED" for r in runs(store))
