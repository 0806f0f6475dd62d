"""A user's script started warm (wif.advisor.script.warm) runs as `python` runs it: a real forkserver, real scripts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from wif.advisor.script import warm
from wif.advisor.script.command import Warm, execute

SCRIPT = """
import atexit, os, sys
print("argv", sys.argv[1:], "name", __name__, "path0", sys.path[0], "cwd", os.getcwd(), flush=True)
print("env", os.environ.get("WIF_TEST_ENV"), "forked_from", os.environ.get("WIF_WATCH_FORKED_FROM") is not None)
atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
if sys.argv[2] == "raise":
    raise ValueError("the script's own error")
if sys.argv[2] == "workers":  # persistent DataLoader workers, left running at the script's end
    import multiprocessing, psutil, torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2, num_workers=2, persistent_workers=True)
    list(loader)
    kids = psutil.Process().children()
    print("main", multiprocessing.current_process().name, multiprocessing.parent_process() is None,
          "workers", len(kids), "of the script", all(k.ppid() == os.getpid() for k in kids), flush=True)
    open(sys.argv[1] + ".pids", "w").write(" ".join(str(k.pid) for k in kids))
    sys.exit(0)
if sys.argv[2] == "own":  # its own MLflow run left open, and a non-daemon thread still at work at its end
    import threading, time, mlflow
    mlflow.set_tracking_uri(os.environ["WIF_TEST_STORE"])
    print("own run", mlflow.start_run().info.run_id, flush=True)
    threading.Thread(target=lambda: (time.sleep(0.5), open(sys.argv[1] + ".thread", "w").write("joined"))).start()
    sys.exit(0)
sys.exit(int(sys.argv[2]))
"""


def test_only_this_interpreter_with_a_script_or_module_starts_warm(tmp_path: Path) -> None:
    assert warm.warm_target([sys.executable, "train.py", "--epochs", "2"]) == ("path", "train.py", ["--epochs", "2"])
    assert warm.warm_target([sys.executable, "-m", "examples.x", "-j", "4"]) == ("module", "examples.x", ["-j", "4"])
    assert warm.warm_target([sys.executable, "-X", "dev", "train.py"]) is None  # interpreter options: as it is
    assert warm.warm_target(["bash", "run.sh"]) is None and warm.warm_target([sys.executable]) is None
    other = tmp_path / "bin" / "python"  # the same interpreter file, another environment's bin/
    other.parent.mkdir()
    other.symlink_to(os.path.realpath(sys.executable))
    assert warm.warm_target([str(other), "train.py"]) is None


def test_a_warm_script_runs_as_python_runs_it(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "code" / "my_train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "WIF_TEST_ENV": "given", "WIF_TEST_STORE": f"sqlite:///{tmp_path / 'own.db'}"}
    for how, code in (("3", 3), ("0", 0), ("raise", 1), ("workers", 0), ("own", 0)):
        marker, log = tmp_path / f"atexit-{how}", tmp_path / f"out-{how}.log"
        rc = Warm(warm.start(("path", str(script), [str(marker), how]), env, str(log))).wait(120)
        text = log.read_text()
        assert rc == code, text
        assert f"argv ['{marker}', '{how}'] name __main__ path0 {script.parent} cwd {tmp_path}" in text
        assert "env given forked_from True" in text
        assert marker.read_text() == "atexit ran"  # the script's own atexit handlers ran at its end
        if how == "raise":
            assert "Traceback" in text and "ValueError: the script's own error" in text
        if how == "workers":  # forked from the script, a main process as `python` makes it; ended with it
            assert "main MainProcess True workers 2 of the script True" in text, text
            pids = [int(p) for p in Path(f"{marker}.pids").read_text().split()]
            assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if how == "own":  # as `python` ends it: the thread joined, MLflow's exit handler ends the open run
            from mlflow.tracking import MlflowClient

            run_id = text.split("own run ", 1)[1].split()[0]
            assert Path(f"{marker}.thread").read_text() == "joined"
            assert MlflowClient(env["WIF_TEST_STORE"]).get_run(run_id).info.status == "FINISHED"


ASKS = "import sys\nprint('stdin', repr(sys.stdin.read()), flush=True)\n"


@pytest.mark.parametrize("warm_start", [True, False], ids=["warm", "cold"])
def test_a_measuring_run_reads_an_empty_stdin_warm_or_not(tmp_path: Path, warm_start: bool) -> None:
    """A script that reads its stdin gets an end of file in a measuring run, started warm or not: what wif-advise
    reads (here a pipe with a line in it, put on this process's stdin) is never the script's. Cold, Popen passed
    it on; warm, multiprocessing gives /dev/null."""
    script = tmp_path / "asks.py"
    script.write_text(ASKS)
    read, write = os.pipe()
    os.write(write, b"typed\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        rc, last = execute([sys.executable, str(script)], {}, str(tmp_path / "log"), 120, warm_start)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    assert (rc, last) == (0, "stdin ''"), (tmp_path / "log").read_text()
