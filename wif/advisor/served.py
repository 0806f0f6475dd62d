"""wif-advise's side of the loader-only trials served in one process of the script.

See NOTE [ Trials in one process ] in wif.watcher.served: the script's side, and why.
"""

from __future__ import annotations

import atexit
import math
import os
import subprocess
import tempfile
import time
from typing import Any, Mapping, Optional, Sequence, Tuple

from wif.advisor.command import end, last_line, launch, ran_out, stop
from wif.watcher.orders import write_json
from wif.watcher.served import SERVE_POLL_S

LEAVE_GRACE_S = 10.0  # a served script told to leave is given this long, then killed


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
