"""A sweep survives bad settings, crashes and interruptions: each case on the real train.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch

from tests.conftest import ROOT, SideBySide, new_store, run_train, selected_params, start_train, train_runs
from tests.images import image_folder
from tests.processes import session_of, wait_for_workers

pytestmark = pytest.mark.slow

BAD_SETTINGS = [
    (("loader=bg", "loader.num_workers=2"), "loader.background"),
    (("loader.prefetch_factor=4",), "loader.prefetch_factor"),
    (("loader.persistent_workers=true",), "loader.persistent_workers"),
    (("data.fraction=0",), "data.fraction"),
    (("data.fraction=0.0001",), "data.fraction"),
    (("data.val_split=1.0",), "data.val_split"),
    (("data.batch_size=0",), "data.batch_size"),
    (("trainer.epochs=-1",), "trainer.epochs"),
    (("loader.num_workers=-1",), "loader.num_workers"),
    (("data=folder", "data.root=/no/such/folder"), "data.root"),
    (("loader.no_such_key=1",), "no_such_key"),
    (("loader=no_such_option",), "no_such_option"),
]
if not torch.cuda.is_available():
    BAD_SETTINGS.append((("device=cuda",), "device=cuda"))


@pytest.fixture(scope="module")
def refusals(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    cache_dir: Path,
    side_by_side: SideBySide,
) -> SideBySide:
    """Each selected bad setting's train.py, in a folder and store of its own, a few at once (a refusal times
    nothing): thirteen processes' imports, paid one after another, were a minute of this module."""
    for overrides in selected_params(request, "test_a_bad_setting_stops_with_a_message", "overrides"):
        work = tmp_path_factory.mktemp("bad")
        store = new_store(work)
        side_by_side.start(
            overrides,
            lambda work=work, store=store, overrides=overrides: (
                run_train(work, store, cache_dir, "preset=smoke", *overrides, multirun=False),
                store,
            ),
        )
    return side_by_side


@pytest.mark.parametrize("overrides,named", BAD_SETTINGS, ids=[" ".join(o) for o, _ in BAD_SETTINGS])
def test_a_bad_setting_stops_with_a_message(refusals: SideBySide, overrides: tuple, named: str) -> None:
    proc, store = refusals.result(overrides)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert named in out, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    assert not train_runs(store, status="FINISHED")


def test_one_failing_job_does_not_stop_the_sweep_and_non_blocking_without_pin_only_warns(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """One sweep, two claims: a job that fails leaves the other to finish, and transfer.non_blocking=true without
    pinned memory (baseline's loader) is said in a warning, never refused: the other job runs with it."""
    # 5% of the folder's 8 training images is none: only the job that loads the folder can tell
    good = image_folder(tmp_path / "good")
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data=folder",
        f"data.root={good}",
        "data.fraction=0.05,1.0",
        "data.val_split=0.25",
        "transfer.non_blocking=true",
        IN_ORDER,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1  # the sweep reports its failure in its exit status ...
    runs = {r.data.params["data.fraction"]: r for r in train_runs(store)}
    assert runs["1.0"].info.status == "FINISHED"  # ... after the other job ran to the end
    assert runs["1.0"].data.params["transfer.non_blocking"] == "True"  # which non_blocking only warned about
    assert "non_blocking has no effect" in out
    assert runs["0.05"].info.status == "FAILED"
    assert "empty training split" in runs["0.05"].data.tags["wif.error"]
    assert "1 finished, 1 failed" in out and "Traceback" not in out
    assert "failed: [1/2] baseline fraction=0.05" in out  # and says which


LONG_RUN = (
    "preset=smoke",
    "loader=pin_nb",
    "loader.num_workers=2",
    "loader.persistent_workers=true",
    "data.fraction=0.25",  # 400 training images: the finishing job's two epochs are short
    "trainer.epochs=50",
)
IN_ORDER = "sweep.shuffle=false"  # these tests act on the sweep's first job: the grid's order, not shuffled


def test_a_killed_worker_or_run_fails_that_run_and_the_sweep_goes_on(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    """Job 1 loses a DataLoader worker; job 2's run process is killed, as the kernel's OOM killer would: each run
    is FAILED with its cause, the crashed run's workers do not outlive it, and job 3 finishes."""
    proc = start_train(tmp_path, store, cache_dir, *LONG_RUN[:-1], "trainer.epochs=50,49,2", IN_ORDER)
    first = wait_for_workers(proc, 2)
    first.children()[0].kill()
    psutil.wait_procs([first], timeout=120)  # gone before the next run's process is looked for
    second = wait_for_workers(proc, 2)
    workers = second.children()
    second.kill()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0
    runs = {r.data.params["trainer.epochs"]: r for r in train_runs(store)}
    error = runs["50"].data.tags["wif.error"]
    assert runs["50"].info.status == "FAILED" and "worker" in error.lower(), error
    assert runs["49"].info.status == "FAILED" and "ProcessDied" in runs["49"].data.tags["wif.error"]
    assert runs["2"].info.status == "FINISHED", out[-3000:]
    psutil.wait_procs(workers, timeout=10)
    assert not [w for w in workers if w.is_running()], "the crashed run's workers were left behind"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_marks_the_run_killed_and_leaves_no_orphans(
    tmp_path: Path, store: str, cache_dir: Path, sig: signal.Signals
) -> None:
    # Ctrl-C stops a single run, a scheduler's SIGTERM a sweep: both exit 130, as shells expect
    proc = start_train(tmp_path, store, cache_dir, *LONG_RUN, multirun=sig == signal.SIGTERM)
    wait_for_workers(proc, 2)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C in a terminal reaches the whole foreground group
    else:
        proc.send_signal(sig)  # a scheduler stops the command it started
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    (run,) = train_runs(store)
    assert run.info.status == "KILLED"
    time.sleep(1)
    left = [p for p in psutil.process_iter(["pid"]) if session_of(p) == proc.pid]
    assert not left, f"orphans: {left}"


def most_at_once(runs: list) -> int:
    """The most runs that were RUNNING at one moment (start and end times, in ms)."""
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time, -1) for r in runs])
    level, most = 0, 0
    for _, step in events:  # at equal times an end (-1) sorts first: touching runs do not overlap
        level += step
        most = max(most, level)
    return most


def test_concurrent_writers_lose_nothing(tmp_path: Path, store: str, cache_dir: Path) -> None:
    procs = []
    for i, loaders in enumerate(("baseline,pin", "bg,bg_pin")):  # two sweeps: each pays seconds of imports
        work = tmp_path / f"w{i}"
        work.mkdir()
        procs.append(start_train(work, store, cache_dir, "preset=smoke", f"loader={loaders}", f"repeat={i}"))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[-1500:] for o in outs]
    assert not any("database is locked" in o for o in outs)
    runs = train_runs(store, status="FINISHED")
    assert len(runs) == 4
    print(f"SQLite: 2 sweeps, at most {most_at_once(runs)} runs RUNNING at once")
    assert most_at_once(runs) >= 2  # they did write side by side
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, "epoch_time_s")) == 3
        assert "epoch_time_mean_s" in run.data.metrics


OPENER = """
import sys
import mlflow.store.tracking.sqlalchemy_store  # imported before the word: the opening alone is raced
from wif.measure.tracking import Tracker
print("ready", flush=True)
for uri in sys.argv[1:]:
    sys.stdin.readline()  # go: every process has imported and opens this store at once
    print("experiment", Tracker(uri, "race").experiment_id, flush=True)
"""


def said(proc: subprocess.Popen, word: str, timeout: float = 300) -> str:
    """The next line `proc` prints that starts with `word`, what follows it; within `timeout` seconds."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        line = pool.submit(proc.stdout.readline).result(timeout=timeout)
    assert line.startswith(word), f"expected {word!r}, read {line!r}"
    return line[len(word) :].strip()


def test_processes_opening_one_new_sqlite_store_together_all_succeed(tmp_path: Path) -> None:
    """MLflow migrates a new SQLite schema on first use; racing migrations used to corrupt it for good. Three
    rounds of four processes opening a new store together: the four import once, then open each round's store
    on the same word, so each round is a close race, not one decided by how long each import took."""
    rounds = [f"sqlite:///{tmp_path / f'r{round_}' / 'mlflow.db'}" for round_ in range(3)]
    errs = [tmp_path / f"p{i}.err" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, *rounds],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err.open("w"),
        )
        for err in errs
    ]
    try:
        for proc in procs:
            said(proc, "ready")
        for round_ in rounds:
            for proc in procs:
                proc.stdin.write("go\n")
                proc.stdin.flush()
            ids = {said(proc, "experiment") for proc in procs}
            assert len(ids) == 1, (round_, ids)  # one experiment, the same id
        for proc in procs:
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
    except AssertionError as failed:
        for proc in procs:
            proc.kill()
        raise AssertionError(f"{failed}; {[e.read_text()[-800:] for e in errs]}") from failed
