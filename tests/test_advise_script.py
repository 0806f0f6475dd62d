"""`wif-advise -- python my_train.py ARGS...`: the user's own script advised under wif.watch, run for real in
subprocesses on a real SQLite store. Bad commands are one line and exit 2 and leave no run; a sleeping
Dataset at 0 workers is data-bound and a worker setting is raced; a compute-bound script is not."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import (
    SideBySide,
    _as_in_a_terminal,
    holds_unless_disturbed,
    new_store,
    selected_cases,
    selected_params,
)
from wif.config.exits import EXIT_INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]


def advise(tmp_path: Path, store: str, *argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("WIF_WATCH_ORDERS", None)
    return subprocess.run(
        [sys.executable, "-m", "wif.advisor.advise_cli", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runs(store: str) -> List:
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'advise'")


BAD = {
    "missing.py": ("", "missing.py: no such script"),
    "nowatch.py": ("print('training without the watch')\n", "ended without a training loader"),
    "fails.py": (
        "import sys\nprint('no data here', file=sys.stderr)\nsys.exit(3)\n",
        "failed before wif.watch (exit 3): no data here",
    ),
    "no_loader.py": ("import wif\nfor batch in wif.watch([[1, 2], [3, 4]]):\n    pass\n", "with no DataLoader inside"),
}


def in_a_folder(tmp_path_factory: pytest.TempPathFactory, source: str, name: str, *args: str, **kw: Any):
    """A command of its own (a folder, a store, `source` written as `name` unless empty) that advises `name`."""
    work = tmp_path_factory.mktemp("advise")
    store = new_store(work)
    if source:
        (work / name).write_text(source)
    return lambda: (advise(work, store, "--", sys.executable, name, *args, **kw), store)


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
    """The selected commands that time nothing, a few at once: each bad command, the script of too few batches,
    the one that fails under the watch, and the probes of scripts that leave each epoch early. Each pays
    seconds of importing torch and MLflow: one after another, they were two and a half minutes of this module."""
    for name in selected_params(request, "test_a_bad_command_is_one_line_exit_2_and_no_run", "name"):
        side_by_side.start(name, in_a_folder(tmp_path_factory, BAD[name][0], name, timeout=300))
    if selected_cases(request, "test_too_few_epochs_are_said_in_one_line_with_the_runs_output"):
        side_by_side.start("too few", in_a_folder(tmp_path_factory, SCRIPT, "train.py", "1", "0", timeout=300))
    if selected_cases(request, "test_a_script_that_fails_under_the_watch_ends_every_run"):
        side_by_side.start("dies", in_a_folder(tmp_path_factory, DIES, "dies.py", timeout=600))
    hows = selected_params(request, "test_the_probe_ends_a_script_that_leaves_each_epoch_early", "how")
    if hows:  # one process probes each: its imports paid once
        works = [tmp_path_factory.mktemp("early") for _ in hows]
        run = probing(works, EARLY_LEAVER, hows)
        side_by_side.start("early", lambda: dict(zip(hows, zip(run(), works))))
    return side_by_side


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_command_is_one_line_exit_2_and_no_run(side_commands: SideBySide, name: str) -> None:
    done, store = side_commands.result(name)
    said = BAD[name][1]
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("wif-advise:")]
    assert len(lines) == 1 and said in lines[0], done.stderr[-2000:]
    assert runs(store) == []


DIES = (
    "import torch, wif\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)\n"
    "for epoch in range(5):\n    for (x,) in wif.watch(loader):\n        pass\n"
    "    if epoch == 1:\n        raise ValueError('diverged')\n"
)


@pytest.mark.slow
def test_a_script_that_fails_under_the_watch_ends_every_run(side_commands: SideBySide) -> None:
    """It reaches wif.watch, then fails in its second epoch: one line, exit 2, no run left RUNNING."""
    done, store = side_commands.result("dies")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "ValueError: diverged" in done.stderr.strip().splitlines()[-1]
    found = runs(store)
    assert found and all(r.info.status != "RUNNING" for r in found)
    assert any(r.info.status == "FAILED" and r.data.tags["wif.advise_role"] == "parent" for r in found)


SCRIPT = (
    "import sys, time, torch, wif\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)\n"
    "for epoch in range(int(sys.argv[1])):\n    for (x,) in wif.watch(loader):\n"
    "        time.sleep(float(sys.argv[2]))\n"
)


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
    env = {k: v for k, v in os.environ.items() if k != "WIF_WATCH_ORDERS"}
    done = subprocess.run(
        [sys.executable, "-c", PREPARED, "40", "0.3"],
        cwd=work,
        env={**env, "PYTHONPATH": str(ROOT), "WIF_ADVISE_WARM": "0", "MLFLOW_TRACKING_URI": new_store(work)},
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
def test_an_order_that_cannot_reach_the_loader_is_said_and_has_no_figure(tmp_path: Path, store: str) -> None:
    """The loop iterates a DataLoader the order does not replace: each worker trial would time 0 workers
    under its name. The trial says so in one line; no worker setting has a figure, a race or a pick."""
    (tmp_path / "train.py").write_text(UNREACHABLE)
    argv = ("--minutes", "1.5", "measure.contended_pct=1000", "--", sys.executable, "train.py", "40")
    done = advise(tmp_path, store, *argv, timeout=600)
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


def test_no_measuring_run_starts_past_the_deadline(tmp_path: Path) -> None:
    """With the advice's minutes spent, a measurement is SKIPPED, said as such, and no run is started or
    recorded (before: it started, was stopped "-1 s into this run" and left a FAILED run behind)."""
    from wif.advisor.runner import SKIPPED, Failure, Recording
    from wif.advisor.script.runner import ScriptRunner

    recording = Recording(tracker=None, device="cpu", parent_id="parent", advise_id="advise")
    runner = ScriptRunner(recording, deadline=time.monotonic() - 1, command=["python", "train.py"])
    m = runner.run(None, "loader", "w4")  # a real run would need its configuration and store: none is touched
    assert m.status == SKIPPED and not m.ok and "--minutes ran out before it started" in m.error and runner.runs == []
    assert m.failure is Failure.OUT_OF_TIME


def test_a_failed_measurement_says_why_as_a_type() -> None:
    """The command's exit and last line are read once, at the process's edge: past it, why a run gave no figure
    is a Failure, never matched by its text (before: `"ran out" in m.error`, `m.error.startswith(UNREACHED)`)."""
    from wif.advisor.runner import FINISHED, Failure
    from wif.advisor.script.command import ran_out
    from wif.advisor.script.runner import _outcome
    from wif.config import Config
    from wif.watcher.proof import UNREACHED

    conf = Config()
    said = {
        (1, f"wif.watch: {UNREACHED}: num_workers=4 was ordered", 0): Failure.UNREACHED,
        (-1, ran_out(12.0), 0): Failure.OUT_OF_TIME,
        (1, "RuntimeError: out of memory", 0): Failure.FAILED,
        (0, "done", 1): Failure.RAN_OUT,
        (0, "done", 2): None,
    }
    for (rc, last, windows), failure in said.items():
        status, text, why = _outcome(conf, rc, last, windows, "log.txt")
        assert why is failure and (status == FINISHED) == (failure is None) and (text == "") == (failure is None)


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


@pytest.mark.slow
def test_too_few_epochs_are_said_in_one_line_with_the_runs_output(side_commands: SideBySide) -> None:
    """A script of one epoch of 4 batches, too few to cut into windows: its measuring run has no measured
    window (before: FINISHED on its warm-up alone, and advised from it). One line, exit 2, with the run's output."""
    done, store = side_commands.result("too few")
    assert done.returncode == 2, done.stderr[-2000:]
    said = done.stderr.strip().splitlines()[-1]
    assert "ended after 1 window(s) under wif.watch; a measurement needs 2" in said and "its output: " in said
    assert all(r.info.status != "RUNNING" for r in runs(store))


@pytest.mark.alone
@pytest.mark.slow
def test_the_minutes_run_out_are_said(tmp_path: Path, store: str) -> None:
    """A script of 4-s epochs under --minutes 0.25: the measuring run is stopped when the minutes run out
    (before: no measuring run had a deadline). One line, exit 2."""
    (tmp_path / "train.py").write_text(SCRIPT)
    t0 = time.monotonic()
    done = advise(tmp_path, store, "--minutes", "0.25", "--", sys.executable, "train.py", "40", "1", timeout=300)
    assert done.returncode == 2 and time.monotonic() - t0 < 40, done.stderr[-2000:]
    assert "--minutes ran out" in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
    assert all(r.info.status != "RUNNING" for r in runs(store))


@pytest.mark.alone
@pytest.mark.slow
def test_a_sleeping_dataset_at_0_workers_gets_workers_raced(tmp_path: Path, store: str) -> None:
    """The loop as people write it: a new tqdm bar each epoch, and a per-epoch step limit that leaves each
    epoch after 4 of its 6 batches. Every measuring run times the epochs it was asked for (before, the
    second epoch's tqdm was an unwatched loop and the break escaped the orders: runs went uncapped)."""
    done = advise(
        tmp_path,
        store,
        "--minutes",
        "3",
        "--race-candidates",
        "1",
        "--max-epochs",
        "6",
        "measure.contended_pct=1000",
        "--",
        sys.executable,
        "-m",
        "examples.train_slow_reads",
        *("--epochs", "40", "--n-train", "192", "--batch-size", "32", "--tqdm", "--max-steps", "4"),
    )
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
    done = advise(
        tmp_path,
        store,
        "--minutes",
        "3",
        "measure.contended_pct=1000",
        "--",
        sys.executable,
        "-m",
        "examples.train_compute_bound",
        "--epochs",
        "40",
        "--n-train",
        "64",
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "Not data-bound" in done.stdout and "Keep what you have" in done.stdout, done.stdout
    assert all(r.info.status == "FINISHED" for r in runs(store))


@pytest.mark.slow
def test_sigterm_ends_the_script_and_every_run_killed(tmp_path: Path, store: str) -> None:
    """SIGTERM while the script measures: wif-advise stops it (SIGINT, its own way out), ends every run of the
    advice KILLED, exits 130, and leaves no process of the script behind."""
    import signal
    import time

    import psutil

    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wif.advisor.advise_cli",
            "--",
            sys.executable,
            "-m",
            "examples.train_slow_reads",
            *("--epochs", "40", "--delay-ms", "20"),
            *("--n-train", "256", "--batch-size", "16"),  # batches of 0.32 s: a short probe, epochs of 5 s
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    script = []
    while not script and time.monotonic() < deadline:  # the measuring run's process: the advice is under way
        time.sleep(1)
        # the script forked warm by wif-advise's forkserver (wif.advisor.script.warm), with the server itself
        script = psutil.Process(proc.pid).children(recursive=True) if runs(store) else []
    assert len(script) >= 2, "the measuring run never started"
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert "interrupted" in err.strip().splitlines()[-1]
    found = runs(store)
    assert found and all(r.info.status == "KILLED" for r in found), [(r.info.run_name, r.info.status) for r in found]
    _, alive = psutil.wait_procs(script, timeout=10)  # the server leaves when wif-advise has ended
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


CTRL_C = """
import os, signal, sys, time, torch, wif
from torch.utils.data import DataLoader, TensorDataset
here = sys.argv[1]
def on_sigint(signum, frame):
    with open(os.path.join(here, "sigints"), "a") as out:
        out.write("SIGINT\\n")
    if not getattr(on_sigint, "seen", False):
        on_sigint.seen = True
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)
loader = DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=2)
try:
    for epoch in range(1000):
        for (x,) in wif.watch(loader):
            open(os.path.join(here, "running"), "a").close()
            time.sleep(0.02)
finally:
    time.sleep(1.0)  # its own clean-up: a checkpoint written, a tracker closed
"""


@pytest.mark.slow
def test_ctrl_c_at_a_terminal_reaches_the_script_once(tmp_path: Path, store: str) -> None:
    """Ctrl-C at a terminal reaches wif-advise and the script together (one foreground process group): the
    script gets SIGINT once and ends its own way (before: wif-advise sent it a second SIGINT at once, which
    cut its clean-up short). wif-advise runs on a pseudo-terminal here, the Ctrl-C sent to its process group."""
    import pty
    import threading

    script = tmp_path / "train.py"
    script.write_text(CTRL_C)
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("WIF_WATCH_ORDERS", None)
    argv = [sys.executable, "-m", "wif.advisor.advise_cli", "--", sys.executable, str(script), str(tmp_path)]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, the pseudo-terminal its controlling terminal
        os.chdir(tmp_path)
        _as_in_a_terminal()  # a test runner in the background passes SIGINT on ignored; a terminal's job has it
        os.execve(sys.executable, argv, env)
    said: List[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal's other end closed
                return
            if not chunk:
                return
            said.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not (tmp_path / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "running").exists(), b"".join(said)[-2000:]
    os.killpg(pid, signal.SIGINT)  # the terminal's Ctrl-C: to its foreground process group
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
        pytest.fail("wif-advise did not end after Ctrl-C")
    reader.join(5)
    assert os.waitstatus_to_exitcode(status) == EXIT_INTERRUPTED, b"".join(said)[-2000:]
    assert (tmp_path / "sigints").read_text().split() == ["SIGINT"]  # once, and its clean-up ran to its end
    assert all(r.info.status != "RUNNING" for r in runs(store))
