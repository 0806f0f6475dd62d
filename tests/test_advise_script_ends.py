"""`wif-advise -- python my_train.py ARGS...` where the advice ends short, run for real in subprocesses on a real
SQLite store: a bad command is one line, exit 2, and leaves no run; a script that fails under the watch, or has
too few batches, or outlasts --minutes, is said in one line, exit 2, no run left RUNNING; a refusal leaves no
warm server; SIGTERM and Ctrl-C end the script and every run. The advice's outcomes: tests/test_advise_script.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import psutil
import pytest

from tests.advising import SCRIPT, advise, advise_env, in_a_folder, runs
from tests.conftest import SideBySide, _as_in_a_terminal, selected_cases, selected_params
from wif.config.exits import EXIT_INTERRUPTED

BAD = {
    "missing.py": ("", "missing.py: no such script"),
    "nowatch.py": ("print('training without the watch')\n", "ended without a training loader"),
    "fails.py": (
        "import sys\nprint('no data here', file=sys.stderr)\nsys.exit(3)\n",
        "failed before wif.watch (exit 3): no data here",
    ),
    "no_loader.py": ("import wif\nfor batch in wif.watch([[1, 2], [3, 4]]):\n    pass\n", "with no DataLoader inside"),
}
# The warm server (wif.advisor.script.warm) preloads torch and MLflow while the probe runs: CPU seconds beside
# each command, then ended by its refusal. A refusal is the same without it; the server is tested where runs start.
WARM_OFF = {"WIF_ADVISE_WARM": "0"}


@pytest.fixture(scope="module")
def side_commands(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, side_by_side: SideBySide
) -> SideBySide:
    """The selected commands that time nothing, a few at once: each bad command, the script of too few batches,
    and the one that fails under the watch. Each pays seconds of importing torch and MLflow: one after another,
    they were two and a half minutes of this module. A bad command starts no warm server: see WARM_OFF."""
    for name in selected_params(request, "test_a_bad_command_is_one_line_exit_2_and_no_run", "name"):
        side_by_side.start(name, in_a_folder(tmp_path_factory, BAD[name][0], name, timeout=300, env=WARM_OFF))
    if selected_cases(request, "test_too_few_epochs_are_said_in_one_line_with_the_runs_output"):
        side_by_side.start("too few", in_a_folder(tmp_path_factory, SCRIPT, "train.py", "1", "0", timeout=300))
    if selected_cases(request, "test_a_script_that_fails_under_the_watch_ends_every_run"):
        side_by_side.start("dies", in_a_folder(tmp_path_factory, DIES, "dies.py", timeout=600))
    return side_by_side


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_command_is_one_line_exit_2_and_no_run(side_commands: SideBySide, name: str) -> None:
    done, store = side_commands.result(name)
    said = BAD[name][1]
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("wif-advise:")]
    assert len(lines) == 1 and said in lines[0], done.stderr[-2000:]
    assert runs(store) == []


@pytest.mark.slow
def test_a_refusal_leaves_no_warm_server_behind(tmp_path: Path, store: str) -> None:
    """The probe finds a failing script: wif-advise ends its warm server, imports unfinished, as it exits (before:
    the server went on importing torch for 6-10 s of a core after the command had ended)."""
    (tmp_path / "fails.py").write_text(BAD["fails.py"][0])
    command = [sys.executable, "-m", "wif.advisor.advise_cli", "--", sys.executable, "fails.py"]
    with open(tmp_path / "err.txt", "w") as err:  # a file, not a pipe: a server holding it would not be waited for
        done = subprocess.run(command, cwd=tmp_path, env=advise_env(store), stderr=err, timeout=300)
    ours = [p.info for p in psutil.process_iter(["pid", "cwd", "cmdline"]) if p.info["cwd"] == str(tmp_path)]
    left = [p for p in ours if "multiprocessing.forkserver" in " ".join(p["cmdline"] or [])]  # its tracker ends too
    said = (tmp_path / "err.txt").read_text()
    assert done.returncode == 2 and BAD["fails.py"][1] in said, said[-2000:]
    assert left == [], left


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
    """A script of 8-s epochs under --minutes 0.6: the measuring run starts after the probe, and is stopped when
    the minutes run out (before: no measuring run had a deadline). One line, exit 2."""
    (tmp_path / "train.py").write_text(SCRIPT)
    t0 = time.monotonic()
    done = advise(tmp_path, store, "--minutes", "0.6", "--", sys.executable, "train.py", "40", "2", timeout=300)
    said = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and time.monotonic() - t0 < 36 + 25, done.stderr[-2000:]
    assert "--minutes ran out" in said, done.stderr[-2000:]
    if "before it started" in said:  # 19 s of 36 here: a machine three times slower probes past the minutes
        pytest.skip(f"the probe outlasted --minutes 0.6 on this machine: no measuring run to stop ({said})")
    assert "into this run, and it was stopped" in said, said
    measured = [r for r in runs(store) if r.data.tags["wif.advise_role"] == "measure"]
    assert [r.info.status for r in measured] == ["FAILED"], said
    assert all(r.info.status != "RUNNING" for r in runs(store))


@pytest.mark.slow
def test_sigterm_ends_the_script_and_every_run_killed(tmp_path: Path, store: str) -> None:
    """SIGTERM while the script measures: wif-advise stops it (SIGINT, its own way out), ends every run of the
    advice KILLED, exits 130, and leaves no process of the script behind."""
    import psutil

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
        env=advise_env(store),
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
    env = advise_env(store)
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
