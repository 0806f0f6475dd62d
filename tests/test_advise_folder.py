"""wif-advise as a timm user first meets it (issue 48): an image folder in timm's layout (train/ and
validation/), checked before anything runs; the whole folder used and said; the bound sized from the
measured workload; other processes' share said; the race within --minutes; Ctrl-C ends every run KILLED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.advising_overrides import SLOW_READS, advise_overrides
from tests.conftest import ROOT, _as_in_a_terminal, new_store
from tests.images import data_cfg
from wif.data.folder import folder_files

SMALL = ("--images", "24", "--held-out", "6", "--classes", "2", "--size", "40")


def make_folder(root: Path, *args: str) -> Path:
    """A small folder in timm's layout, made by the benchmark's own script."""
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "timm_folder.py"), str(root), *SMALL, *args],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return root


def advise_runs(db: Path) -> list:
    client = MlflowClient(f"sqlite:///{db}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`wif.kind` = 'advise'")


@pytest.mark.parametrize("name", ["test", "val", "validation"])
def test_the_held_out_split_is_found_under_its_usual_names(tmp_path: Path, name: str) -> None:
    root = make_folder(tmp_path / "images", "--held-out-name", name)
    files, classes = folder_files(data_cfg(tmp_path / "cache", "data=folder", f"data.root={root}"))
    assert classes == 2 and len(files["train_paths"]) == 24 and len(files["test_paths"]) == 6
    assert files["held_out"] == name and all(f"/{name}/" in p for p in files["test_paths"])


def test_a_folder_without_a_held_out_split_is_refused_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    root = make_folder(tmp_path / "images")
    (root / "validation").rename(root / "holdout")
    out = advise_overrides(tmp_path, "preset=smoke", "data=folder", f"data.root={root}", timeout=300, refused=True)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wif-advise: data=folder") and "val/ or validation/" in lines[0]
    assert "1/4" not in out.stdout and not (tmp_path / "mlflow.db").exists()


@pytest.fixture(scope="module")
def folder_advice(tmp_path_factory: pytest.TempPathFactory):
    """One wif-advise on a 24-image folder in timm's layout, the tiny model, a minute's budget, the least race."""
    tmp = tmp_path_factory.mktemp("advise-folder")
    root = make_folder(tmp / "images")
    t0 = time.monotonic()
    out = advise_overrides(
        tmp,
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.batch_size=8",
        "--minutes",
        "1",
        *("--race-candidates", "1", "--max-blocks", "2", "--max-epochs", "3"),  # no test reads the race: its least
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = advise_runs(tmp / "mlflow.db")
    return out.stdout, runs, time.monotonic() - t0


@pytest.mark.slow
def test_the_advice_uses_the_whole_folder_and_says_so_first(folder_advice) -> None:
    text, runs, _ = folder_advice
    first = text.splitlines()[0]
    assert first.startswith("wif-advise: data: 24 training images an epoch, 3 batches of 8, 64 px"), first
    assert "held out: validation/ (6)" in first
    measured = [r for r in runs if r.data.tags.get("wif.advise_role") == "measure"]  # two: run again if contended
    assert measured and all(
        r.data.params["data.fraction"] == "1.0" and r.data.tags["wif.n_train"] == "24" for r in measured
    )
    assert {r.data.tags["wif.n_val"] for r in measured} == {"0"}  # the folder's own held-out split is the evaluation


@pytest.mark.slow
def test_the_bound_run_takes_the_measured_workloads_batches(folder_advice) -> None:
    _, runs, _ = folder_advice
    bounds = [r for r in runs if r.data.tags.get("wif.advise_role") == "bound"]
    assert bounds and {r.data.params["data.source"] for r in bounds} == {"fixed"}
    assert {r.data.tags["wif.n_train"] for r in bounds} == {"24"}  # the measured run's, not data.num_train's 50,000
    assert {(r.data.params["data.batch_size"], r.data.params["data.image_size"]) for r in bounds} == {("8", "64")}


@pytest.mark.slow
def test_the_advice_says_whether_other_processes_disturbed_it(folder_advice) -> None:
    text, runs, _ = folder_advice
    (line,) = [x for x in text.splitlines() if x.startswith("Other processes:")]
    assert "% of a core" in line and ("not disturbed" in line or "DISTURBED" in line)
    (parent,) = [r for r in runs if r.data.tags.get("wif.advise_role") == "parent"]
    assert parent.data.tags["wif.advise.contention"] == line
    finished = [r for r in runs if r is not parent and r.info.status == "FINISHED"]
    assert finished and all(r.data.tags.get("wif.contended") in ("true", "false") for r in finished)
    assert all("host_other_cpu_pct" in r.data.metrics for r in finished)


@pytest.mark.slow
def test_the_advice_states_its_time_at_its_start(folder_advice) -> None:
    text, _, wall = folder_advice
    assert text.splitlines()[1].startswith("wif-advise: within 1 minutes (--minutes)")
    (said,) = [float(x.split(" runs in ")[1].split(" s")[0]) for x in text.splitlines() if " runs in " in x]
    # counted from the process's start, as the user's clock counts: never more than the wall (said to the second)
    assert said <= wall + 0.5


def test_the_minutes_count_from_the_commands_start_not_from_the_first_step() -> None:
    """Start-up (importing torch, composing, probing a script) is part of the user's wait: --minutes covers it."""
    code = (
        "import os, time; t = time.monotonic(); time.sleep(1.5); from wif.advisor.advise_cli import process_started; "
        "now = time.monotonic(); print(now - process_started(), now - t, flush=True); os._exit(0)"
    )  # no exit time in the wall
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    wall = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    counted, since_code = map(float, out.stdout.split())
    # at least the time since the script's first line, interpreter start-up before it included; never longer than
    # the wall clock around it but for the start's one clock tick: psutil's create_time() could be a second too long
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert since_code <= counted <= wall + tick


@pytest.mark.alone
@pytest.mark.slow
def test_an_epoch_that_is_not_data_bound_settles_the_answer_without_trials(tmp_path: Path) -> None:
    out = advise_overrides(tmp_path, "preset=smoke", "data=synthetic", "model=googlenet", "--epochs", "2", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Not data-bound" in out.stdout and "2/4 candidates: none tried (not data-bound" in out.stdout
    roles = {r.data.tags["wif.advise_role"] for r in advise_runs(tmp_path / "mlflow.db")}
    assert roles == {"parent", "measure", "bound"}  # no loader-only trial, no race: nothing could change the answer


@pytest.mark.alone
@pytest.mark.slow
def test_contended_runs_are_run_again_and_never_decide_the_race(tmp_path: Path) -> None:
    """A process burning a core beside the advice: every run is contended, is run again while there is time,
    and no race decides from one: no pick, and the output says so with the figure."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        out = advise_overrides(
            tmp_path,
            *SLOW_READS,
            "--epochs",
            "2",
            "--race-candidates",
            "1",
            "--min-blocks",
            "2",
            "--max-blocks",
            "2",
            "--max-epochs",
            "3",
            "--minutes",
            "1",
            timeout=900,
        )
    finally:
        burner.kill()
        burner.wait()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "(contended): run again" in text
    (line,) = [x for x in text.splitlines() if x.startswith("Other processes:")]
    assert "DISTURBED" in line and "% of a core" in line
    runs = advise_runs(tmp_path / "mlflow.db")
    (parent,) = [r for r in runs if r.data.tags.get("wif.advise_role") == "parent"]
    race = [r for r in runs if r.data.tags.get("wif.advise_role") == "race" and r.info.status == "FINISHED"]
    if all(r.data.tags["wif.contended"] == "true" for r in race):  # nothing undisturbed: nothing decided
        assert parent.data.tags["wif.advise.pick"] == "keep" and "speedup" not in parent.data.metrics
        assert "Pick:" not in text
    late = [r for r in race if r.info.start_time - parent.info.start_time > (1 * 60 + 60) * 1000]
    assert not late, "race runs started after --minutes 1 (and a minute's slack for a slow block)"


@pytest.mark.slow
def test_ctrl_c_ends_every_run_of_the_advice_killed(tmp_path: Path) -> None:
    """Ctrl-C pressed again and again as the advice trains: not one of its runs is left RUNNING."""
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "WIF_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wif.advisor.advise_cli",
            *SLOW_READS,
            "--epochs",
            "4",
            f"tracking.uri={new_store(tmp_path)}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_as_in_a_terminal,
    )
    try:
        seen = ""
        while "1/4" not in seen and proc.poll() is None:  # printed once the parent run is in the store
            seen += proc.stdout.readline()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # a nested run open: the measuring run is training
            if any(
                r.info.status == "RUNNING" and r.data.tags.get("wif.advise_role") == "measure" for r in advise_runs(db)
            ):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the measuring run never started: " + seen)
        time.sleep(2.0)  # into its epochs
        for _ in range(10):  # Ctrl-C, pressed again as it winds down: the terminal signals the whole group
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:  # it has ended
                break
            time.sleep(0.05)
        output = seen + proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    runs = advise_runs(db)
    assert {r.data.tags["wif.advise_role"] for r in runs} >= {"parent", "measure"}
    assert {r.info.status for r in runs} == {"KILLED"}, [(r.data.tags["wif.advise_role"], r.info.status) for r in runs]
    assert proc.returncode == 130, output[-3000:]  # as a shell reports an interrupted command


def test_a_contended_run_replaced_by_an_undisturbed_one_does_not_make_the_advice_disturbed() -> None:
    from wif.advisor.runner import Measured
    from wif.advisor.workload import contention_line

    def run(other: float, contended: bool = False, replaced: bool = False) -> Measured:
        return Measured(
            "loader", "w2", "id", "FINISHED", {"host_other_cpu_pct": other}, contended=contended, replaced=replaced
        )

    quiet = contention_line([run(2.0), run(32.0, True, True), run(3.0)], 25.0, 1)
    assert quiet.startswith("Other processes: at most 3% of a core during the measured epochs of 2 runs")
    assert "not disturbed; 1 contended run(s) were run again, undisturbed, and only those are used." in quiet
    still = contention_line([run(2.0), run(32.0, True, True), run(40.0, True)], 25.0, 1)
    assert still.startswith("Other processes: DISTURBED: they used 40-40% of a core") and "1 of 3 runs" in still
    assert contention_line([run(2.0), run(5.0)], 25.0, 0).endswith("not disturbed.")
