"""The measurements of `wif-advise -- python my_train.py ARGS...`: each one the user's command run again.

Each run gives orders to the script's `wif.watch` in the environment (`wif.watcher.orders`); the script is
unchanged. `ScriptRunner` is the advice's `Runner` for a script: the same roles, measure, bound, loader and
race, the same nested MLflow runs, and `Measured` read back the same way. So `wif.advisor.steps` predicts,
races and answers as it does for `train.py`. A configuration becomes orders: its trainer's mode and epochs,
where `trainer.epochs=auto` is the study's stopping rule (`wif.run.record.stop_rule`). Where its loader keys
differ from the script's own DataLoader, the orders carry the settings the watch rebuilds it with. Each
run is measured in windows of `--batches` batches (NOTE [ Windows ] in wif.watcher.windows): a script that
ends before it has its windows is measured again in smaller ones.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from wif.advisor import warm
from wif.advisor.candidates import script_extras
from wif.advisor.runner import Ended, Measured, Recording, Runner
from wif.advisor.settings import Candidate, training
from wif.config import Config, TrainerMode, as_plain
from wif.measure import names
from wif.measure.contention import is_contended
from wif.measure.tracking import FAILED, FINISHED, KILLED
from wif.run.record import stop_rule
from wif.run.supervise import INTERRUPT_GRACE_S
from wif.watcher import hook
from wif.watcher.orders import ENV
from wif.watcher.proof import UNREACHED

TERMINAL_GRACE_S = 2.0  # a script that got the terminal's Ctrl-C is given this long before SIGINT is sent
LOADER_KEYS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory", "in_order")
WANTED_WINDOWS = 8  # a script that ran out is cut into this many windows: the race's warm-up and 7 steady ones
MIN_WINDOW = 4  # batches a window at least
RAN_OUT = "the command ended after"


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
    # WIF_ADVISE=1: the script can skip its checkpoints, uploads or auto-resume there (docs/advise.md).
    env = {**os.environ, ENV: json.dumps(dict(orders)), "PYTHONUNBUFFERED": "1", "WIF_ADVISE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([hook.BOOT, *filter(None, [os.environ.get("PYTHONPATH")])])  # no line changed
    target = warm.warm_target(command) if warm_start else None
    with open(log_path, "w") as log:
        try:
            proc: Any = (
                Warm(warm.start(target, env, log_path))
                if target is not None
                else subprocess.Popen(
                    list(command), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            )
        except OSError as err:
            return 127, f"{command[0]}: {err.strerror}"
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -1, f"the advice's --minutes ran out {timeout:.0f} s into this run, and it was stopped"
        except KeyboardInterrupt:
            stop(proc)
            raise
    lines = [line.strip() for line in open(log_path, errors="replace") if line.strip()]
    said = [line for line in lines if not line.startswith(("wif.watch: epoch", "wif.watch: window"))]
    return rc, (said or lines or [""])[-1]


def stop(proc: Any) -> None:
    """Ctrl-C or SIGTERM reached wif-advise: the script ends its own way, given SIGINT once.

    A Ctrl-C at the terminal has reached it already where it is in the terminal's foreground process group.
    A second SIGINT would cut its own clean-up short. So it gets a moment to end, and SIGINT only if it has
    not: a `kill` of wif-advise alone. Past the grace, it is killed.
    """
    if not (_at_the_terminal(proc.pid) and _ended(proc, TERMINAL_GRACE_S)):
        proc.send_signal(signal.SIGINT)
        if not _ended(proc, INTERRUPT_GRACE_S):
            proc.kill()
            proc.wait()


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
    """A script started warm (wif.advisor.warm), waited for and signalled as a Popen is."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.pid = proc.pid

    def wait(self, timeout: Optional[float] = None) -> int:
        """Its exit code, once it ends within `timeout`; else subprocess.TimeoutExpired."""
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired("the script", timeout or 0.0)
        return self.proc.exitcode

    def send_signal(self, sig: int) -> None:
        """Send `sig` while it runs."""
        if self.proc.exitcode is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """Kill it."""
        self.proc.kill()


class ScriptRunner(Runner):
    """Runs the advice's measurements as the user's own command under wif.watch."""

    bound_label = "the first batches replayed"

    def __init__(
        self,
        recording: Recording,
        deadline: float = math.inf,
        say: Any = print,
        *,
        command: Sequence[str] = (),
        probed: Optional[Dict[str, Any]] = None,
        cap: int = 50,
    ) -> None:
        """A runner whose runs are `command`, its loader as `probed`, measured in windows of `cap` batches."""
        super().__init__(recording, deadline=deadline, say=say)
        self.command, self.probed, self.cap = list(command), dict(probed or {}), cap
        self.logs = tempfile.mkdtemp(prefix="wif-advise-script-")
        self.told = False  # that a measured epoch is a window of a longer one

    def bound(self, base: Config, epochs: int, n_train: int) -> Optional[Config]:
        """The script as it is, its first batches replayed from its second epoch on: the orders' `bound`."""
        return training(base, Candidate(name="bound", keys={}), epochs)

    knobs = staticmethod(script_extras)  # DataLoader's own knobs: the script's copy stays its own

    def orders(self, conf: Config, role: str, run_id: str) -> Dict[str, Any]:
        """What the watch in the script is to do for this run."""
        tr = conf.trainer
        mode = "bound" if role == "bound" else "loader_only" if tr.mode is TrainerMode.loader_only else "train"
        spec: Dict[str, Any] = {
            "uri": self.tracker.uri,
            "experiment": conf.tracking.experiment,
            "run_id": run_id,
            "mode": mode,
            "batches": tr.max_batches if mode == "loader_only" else self.cap,
        }
        if tr.auto:
            spec["auto"] = asdict(stop_rule(tr))
        else:
            spec["epochs"] = int(tr.epochs)
        loader = {k: getattr(conf.loader, k) for k in LOADER_KEYS}
        if any(loader[k] != self.probed.get(k) for k in LOADER_KEYS):
            spec["loader"] = loader
        return spec

    def _once(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Measured:
        """One run of the command for `conf`, recorded and read back; again in smaller windows if it ran out."""
        m = self._run_command(conf, role, name, extra)
        window = self._smaller_window(m, conf)
        if window is not None:
            self.say(
                f"  {role} {name}: your script ended after {int(m.summary[names.SCRIPT_BATCHES])} batches, "
                f"{int(m.summary.get(names.EPOCHS_RUN, 0))} window(s) of {self.cap}: measured again, and from here "
                f"on, in windows of {window} batches"
            )
            self.cap, m.replaced = window, True
            m = self._run_command(conf, role, name, extra)
        if m.summary.get(names.WINDOWED) and not self.told:
            self.told = True
            self.say(f"  an epoch below is a window of {self.cap} batches of your script's longer epoch")
        return m

    def _smaller_window(self, m: Measured, conf: Config) -> Optional[int]:
        """A window that cuts what a script offered into WANTED_WINDOWS, where it ran out; None: none needed or helps.

        Ran out: too few windows for a figure, or a script of one epoch with fewer than the run asked.
        """
        got, offered = int(m.summary.get(names.EPOCHS_RUN, 0)), int(m.summary.get(names.SCRIPT_BATCHES, 0))
        tr = conf.trainer
        asked = min(tr.min_epochs, tr.max_epochs) if tr.auto else int(tr.epochs)
        short = m.status == FAILED and m.error.startswith(RAN_OUT)
        one_epoch = m.status == FINISHED and m.summary.get(names.SCRIPT_EPOCHS) == 1 and got < asked
        window = max(offered // WANTED_WINDOWS, MIN_WINDOW)
        return window if (short or one_epoch) and window < self.cap and offered // window > got else None

    def _run_command(self, conf: Config, role: str, name: str, extra: Optional[Mapping[str, str]]) -> Measured:
        """One run of the command for `conf`, recorded and read back."""
        t0 = time.monotonic()
        tags = {
            **self.tags(conf, role, name, extra),
            names.TAG_MODEL: "script",
            names.TAG_SCRIPT: " ".join(self.command),
        }
        plain = as_plain(conf)
        run_id = self.tracker.start_run(f"advise-{role}-{name}", plain, tags, plain)
        log = os.path.join(self.logs, f"{len(self.runs):03d}-{role}-{name}.log")
        status, text, summary = KILLED, "interrupted (Ctrl-C, SIGTERM)", {}
        try:
            left = self.left_s()  # every measuring run ends within the advice's deadline
            orders = self.orders(conf, role, run_id)
            rc, last = execute(self.command, orders, log, timeout=None if math.isinf(left) else left)
            summary = dict(self.tracker.client.get_run(run_id).data.metrics)
            status, text = _outcome(conf, rc, last, int(summary.get(names.EPOCHS_RUN, 0)), log)
        finally:
            contended = status == FINISHED and is_contended(
                summary.get(names.HOST_OTHER_CPU_PCT), conf.measure.contended_pct
            )
            self.tracker.set_tags(
                run_id,
                {
                    names.TAG_CONTENDED: str(contended).lower(),
                    "wif.script_log": log,
                    **({names.TAG_ERROR: text[:4000]} if text else {}),
                },
            )
            self.tracker.end_run(run_id, status)
        return self.measured(conf, role, name, Ended(run_id, status, summary, text), t0)


def _outcome(conf: Config, rc: int, last: str, run: int, log: str) -> Tuple[str, str]:
    """(the run's status, its error in one line): its exit code `rc` and its `run` windows against the need.

    Args:
        conf: the run's configuration.
        rc: the command's exit code.
        last: its last line of output.
        run: the windows it ran under wif.watch.
        log: where its output is.
    """
    need = 1 if conf.trainer.mode is TrainerMode.loader_only else conf.trainer.warmup_epochs + 1
    if rc != 0 and UNREACHED in last:  # no figure for this setting, and why: wif.watcher.proof
        return FAILED, f"{last[last.index(UNREACHED) :]} (its output: {log})"
    if rc != 0:
        said = last if rc == -1 else f"the command exited {rc}: {last}"
        return FAILED, f"{said} (its output: {log})"
    if run < need:
        return FAILED, (
            f"{RAN_OUT} {run} window(s) under wif.watch; a measurement needs {need} (the first is its warm-up): "
            f"let the script run longer (its output: {log})"
        )
    return FINISHED, ""
