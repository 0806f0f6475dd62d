"""The user's command run with orders to its `wif.watch`: started warm where it can, waited for, stopped.

Every measuring run of `wif-advise -- COMMAND` is the command run again (wif.advisor.script.runner).
`Served` keeps one process of the command for all the loader-only trials. Its script's side, and why, is
NOTE [ Trials in one process ] in wif.watcher.served.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import subprocess
import tempfile
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import psutil

from wif.advisor.script import warm
from wif.run.supervise import INTERRUPT_GRACE_S
from wif.watcher import hook
from wif.watcher.orders import ENV, write_json
from wif.watcher.served import SERVE_POLL_S

TERMINAL_GRACE_S = 2.0  # a script that got the terminal's Ctrl-C is given this long before SIGINT is sent
END_GRACE_S = 5.0  # a command ended by its timeout: SIGTERM, and SIGKILL to what is left past this
LEAVE_GRACE_S = 10.0  # a served script told to leave is given this long, then killed


def execute(
    command: Sequence[str],
    orders: Mapping[str, Any],
    log_path: str,
    timeout: Optional[float] = None,
    warm_start: bool = True,
) -> Tuple[int, str]:
    """Run the command with `orders`: (its exit code, its last line of output that is not the watch's).

    It starts warm where it can and `warm_start` allows. It reads no stdin, warm or not: multiprocessing gives
    a forked child /dev/null. So a measuring run that asks a question gets an end of file, never the terminal.
    Ctrl-C or SIGTERM here stops it too, given its grace to end its own way, and is raised again.

    Args:
        command: the user's command.
        orders: what its wif.watch is to do.
        log_path: where its output goes.
        timeout: seconds it may run; None: no limit.
        warm_start: whether it may be forked from the warm server.
    """
    try:
        with open(log_path, "w") as log:
            proc = launch(command, orders, log, warm_start=warm_start)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                end(proc)
                return -1, ran_out(timeout)
            except KeyboardInterrupt:
                stop(proc)
                raise
    except OSError as err:
        return 127, f"{command[0]}: {err.strerror}"
    return rc, last_line(log_path)


def launch(command: Sequence[str], orders: Mapping[str, Any], log: Any, warm_start: bool = True) -> Any:
    """The command started with `orders`, its output to the open file `log`: a Popen, or a Warm; OSError."""
    # WIF_ADVISE=1: the script can skip its checkpoints, uploads or auto-resume there (docs/advise.md).
    env = {**os.environ, ENV: json.dumps(dict(orders)), "PYTHONUNBUFFERED": "1", "WIF_ADVISE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([hook.BOOT, *filter(None, [os.environ.get("PYTHONPATH")])])  # no line changed
    target = warm.warm_target(command) if warm_start else None
    if target is not None:
        return Warm(warm.start(target, env, log.name))
    # A session of its own: its process group is the command's alone, ended whole (`end`).
    io = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT}
    return subprocess.Popen(list(command), env=env, start_new_session=True, **io)


def ran_out(timeout: Optional[float]) -> str:
    """The line of a run that the advice's minutes stopped."""
    return f"the advice's --minutes ran out {timeout or 0:.0f} s into this run, and it was stopped"


def last_line(log_path: str) -> str:
    """The output's last line that is not the watch's own, or its last line."""
    lines = [line.strip() for line in open(log_path, errors="replace") if line.strip()]
    said = [line for line in lines if not line.startswith(("wif.watch: epoch", "wif.watch: window"))]
    return (said or lines or [""])[-1]


def stop(proc: Any) -> None:
    """Ctrl-C or SIGTERM reached wif-advise: the script ends its own way, given SIGINT once.

    A warm script in the terminal's foreground group got Ctrl-C already; a second would cut its clean-up short. So
    it gets a moment first, then SIGINT, then past the grace it is ended with all it started (`end`).
    """
    if not (_at_the_terminal(proc.pid) and _ended(proc, TERMINAL_GRACE_S)):
        _signal(proc.pid, [], signal.SIGINT)  # as the terminal's Ctrl-C: its process group, a shell's children too
        if not _ended(proc, INTERRUPT_GRACE_S):
            end(proc)


def end(proc: Any, grace_s: float = END_GRACE_S) -> None:
    """The command ended with all it started: SIGTERM, then SIGKILL to what is left past `grace_s`; reaped.

    The signals go to its process group and its process tree: torchrun starts each rank in a session of its own.
    """
    tree = _descendants(proc.pid)  # listed before any signal: a rank whose torchrun ended is adopted by init
    _signal(proc.pid, tree, signal.SIGTERM)
    if not _ended(proc, grace_s) or _alive(psutil.wait_procs(tree, timeout=grace_s)[1]):
        _signal(proc.pid, tree + _descendants(proc.pid), signal.SIGKILL)
        psutil.wait_procs(tree, timeout=grace_s)
    proc.wait()


def _descendants(pid: int) -> List[psutil.Process]:
    """The processes `pid` started, and theirs; [] where it has ended."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _alive(processes: List[psutil.Process]) -> List[psutil.Process]:
    """Those of `processes` still running: a zombie has ended, its status unread."""
    out = []
    for p in processes:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _signal(pid: int, tree: List[psutil.Process], sig: int) -> None:
    """`sig` to `pid`'s process group where it leads one, else to `pid`; and to each of `tree`."""
    with contextlib.suppress(OSError):  # it has ended: its tree is signalled still
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:  # a warm script: a child of the warm server, in its group
            os.kill(pid, sig)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def _ended(proc: Any, seconds: float) -> bool:
    """Whether `proc` ends within `seconds`."""
    try:
        proc.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def _at_the_terminal(pid: int) -> bool:
    """Whether `pid` is in the foreground process group of this process's terminal (where Ctrl-C lands)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:  # no controlling terminal: no Ctrl-C reached it
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgid(pid)
    except OSError:
        return False
    finally:
        os.close(fd)


class Warm:
    """A script started warm (wif.advisor.script.warm), waited for as a Popen is; signalled by its `pid`."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.pid = proc.pid

    def poll(self) -> Optional[int]:
        """Its exit code; None while it runs."""
        return self.proc.exitcode

    def wait(self, timeout: Optional[float] = None) -> int:
        """Its exit code, once it ends within `timeout`; else subprocess.TimeoutExpired."""
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired("the script", timeout or 0.0)
        return self.proc.exitcode


class Served:
    """The one process of the script that times loader-only trials, each candidate's orders handed to it in turn."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.proc: Any = None
        self.where, self.index, self.log_path = "", 0, ""
        self.log: Any = None
        atexit.register(self.close)

    def measure(
        self, orders: Mapping[str, Any], log_path: str, timeout: Optional[float], *, in_process: bool = False
    ) -> Tuple[int, str, str]:
        """One candidate's trial: (0 once it is done, else the exit code; its last line; the log of its output).

        The process that timed the last candidate times it, where it still waits; else a new one starts.
        A trial that fetches in the main process is its process's last: NOTE [ Trials in one process ].

        Args:
            orders: the candidate's orders.
            log_path: where a new process's output goes.
            timeout: seconds the trial may take; None: no limit.
            in_process: the candidate fetches in the script's main process (num_workers=0).
        """
        if self.proc is not None and self.proc.poll() is None:
            self.index += 1
            write_json(os.path.join(self.where, f"order-{self.index}.json"), {"orders": self._served(orders)})
        else:
            self.close()
            self.where, self.index, self.log_path = tempfile.mkdtemp(prefix="wif-advise-served-"), 0, log_path
            try:
                self.log = open(log_path, "w")
                self.proc = launch(self.command, self._served(orders), self.log)
            except OSError as err:
                self.proc = None
                return 127, f"{self.command[0]}: {err.strerror}", log_path
        rc, last = self._wait(timeout)
        if in_process:  # what its fetch opened stays open in the process: no later candidate's workers inherit it
            self.close()
        return rc, last, self.log_path

    def _served(self, orders: Mapping[str, Any]) -> dict:
        """The orders with where to hand the candidate's end, and who waits for it."""
        return {**orders, "serve": self.where, "serve_index": self.index, "serve_pid": os.getpid()}

    def _wait(self, timeout: Optional[float]) -> Tuple[int, str]:
        """(0, "") once the candidate is done; the exit code and last line where the process ended first."""
        done = os.path.join(self.where, f"done-{self.index}.json")
        t_end = time.monotonic() + (math.inf if timeout is None else timeout)
        try:
            while not os.path.exists(done):
                rc = self.proc.poll()
                if rc is not None:
                    self.proc = None
                    return rc, last_line(self.log_path)
                if time.monotonic() > t_end:
                    end(self.proc)
                    self.proc = None
                    return -1, ran_out(timeout)
                time.sleep(SERVE_POLL_S)
        except KeyboardInterrupt:
            stop(self.proc)
            self.proc = None
            raise
        return 0, ""

    def close(self) -> None:
        """The served process told to leave, and ended: killed past its grace."""
        if self.proc is not None and self.proc.poll() is None:
            write_json(os.path.join(self.where, f"order-{self.index + 1}.json"), {"orders": None})
            try:
                self.proc.wait(LEAVE_GRACE_S)
            except subprocess.TimeoutExpired:
                end(self.proc)
        self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None
