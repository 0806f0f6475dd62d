"""A sweep's processes seen from outside: a run's DataLoader workers awaited, the session a process belongs to, a
supervisor SIGKILLed and its tree gone in time (tests/test_failures.py, tests/test_orphans.py, ...)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import List

import psutil


def wait_for_workers(proc: subprocess.Popen, n: int, timeout: float = 120) -> psutil.Process:
    """The run's process (the child of train.py) once it has `n` DataLoader workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(proc.pid).children():
            try:
                if len(child.children()) >= n:
                    return child
            except psutil.NoSuchProcess:
                continue  # a short-lived helper process that ended since it was listed
        time.sleep(0.2)
    raise AssertionError("the run never started its workers")


def session_of(p: psutil.Process) -> int:
    """The session a process belongs to (-1 once it is gone): a sweep started in its own session owns it."""
    try:
        return os.getsid(p.pid)
    except OSError:
        return -1


GONE_WITHIN_S = 10  # a killed supervisor's runs, ranks and workers are all gone within this


def left_in_session(session: int) -> List[psutil.Process]:
    """Processes of the session still alive (a zombie waits only for its parent to read its status)."""
    return [
        p
        for p in psutil.process_iter(["status"])
        if session_of(p) == session and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def sigkill_and_expect_gone(proc: subprocess.Popen, tree: List[psutil.Process]) -> None:
    """SIGKILL the supervisor `proc` (no handler runs) and assert that `tree` and its session are gone in time."""
    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.communicate(timeout=60)
    _, alive = psutil.wait_procs(tree, timeout=GONE_WITHIN_S)
    assert not alive and time.monotonic() - killed_at < GONE_WITHIN_S, f"still running: {alive}"
    assert not left_in_session(proc.pid)
