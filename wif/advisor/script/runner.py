"""The measurements of `wif-advise -- python my_train.py ARGS...`: each one the user's command run again.

`ScriptRunner` is the advice's `Runner` for a script, with the same roles, nested runs and `Measured`. A
configuration becomes orders to the script's `wif.watch` (`wif.watcher.orders`): its mode, its epochs, and
the loader settings the watch rebuilds the DataLoader with. Each run is measured in windows of `--batches`
batches (NOTE [ Windows ]); a script that ends sooner is measured again in smaller ones. The loader-only
trials all run in one process of the script (`Served`, wif.advisor.script.command).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from wif.advisor.runner import Ended, Failure, Measured, Recording, Runner
from wif.advisor.script.command import Served, execute
from wif.config import Config, TrainerMode, as_plain
from wif.dataloader_args import ORDERED
from wif.measure import names
from wif.measure.contention import is_contended
from wif.measure.tracking import FAILED, FINISHED, KILLED
from wif.run.record import stop_rule
from wif.watcher.proof import UNREACHED

LOADER_KEYS = ORDERED  # the DataLoader arguments the orders may set: wif.dataloader_args
WANTED_WINDOWS = 8  # a script that ran out is cut into this many windows: the race's warm-up and 7 steady ones
MIN_WINDOW = 4  # batches a window at least
RAN_OUT = "the command ended after"


class ScriptRunner(Runner):
    """Runs the advice's measurements as the user's own command under wif.watch."""

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
        self.served = Served(self.command)  # the loader-only trials' one process

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
        if m.summary.get(names.SCRIPT_STREAM):  # NOTE [ A window times the script's own run ] in wif.watcher.windows
            self.assumes = (
                f"Your training loader has no length (a stream): a figure is {self.cap} batches of it as it runs on, "
                "after its workers started. Where your loop starts the stream again, that window carries the start."
            )
        return m

    def _smaller_window(self, m: Measured, conf: Config) -> Optional[int]:
        """A window that cuts what a script offered into WANTED_WINDOWS where it ran out of batches; None: no help."""
        got, offered = int(m.summary.get(names.EPOCHS_RUN, 0)), int(m.summary.get(names.SCRIPT_BATCHES, 0))
        tr = conf.trainer
        asked = min(tr.min_epochs, tr.max_epochs) if tr.auto else int(tr.epochs)
        short = m.failure is Failure.RAN_OUT
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
        status, text, summary, failure = KILLED, "interrupted (Ctrl-C, SIGTERM)", {}, None
        try:
            left = self.left_s()  # every measuring run ends within the advice's deadline
            orders = self.orders(conf, role, run_id)
            timeout = None if math.isinf(left) else left
            if role == "loader":  # every trial in one process: NOTE [ Trials in one process ]
                rc, last, log = self.served.measure(orders, log, timeout, in_process=conf.loader.num_workers == 0)
            else:
                self.served.close()  # its process leaves: the trials are over
                rc, last = execute(self.command, orders, log, timeout=timeout)
            summary = dict(self.tracker.client.get_run(run_id).data.metrics)
            status, text, failure = _outcome(conf, rc, last, int(summary.get(names.EPOCHS_RUN, 0)), log)
        finally:
            contended = status == FINISHED and is_contended(summary, conf.measure.contended_pct)
            self.tracker.set_tags(
                run_id,
                {
                    names.TAG_CONTENDED: str(contended).lower(),
                    "wif.script_log": log,
                    **({names.TAG_ERROR: text[:4000]} if text else {}),
                },
            )
            self.tracker.end_run(run_id, status)
        return self.measured(conf, role, name, Ended(run_id, status, summary, text, failure), t0)


def _outcome(conf: Config, rc: int, last: str, run: int, log: str) -> Tuple[str, str, Optional[Failure]]:
    """(the run's status, its error in one line, why it failed): its exit code `rc` and its `run` windows.

    The command's last line is read here once, at the process's edge; past it the failure is a type.

    Args:
        conf: the run's configuration.
        rc: the command's exit code; -1 where the advice's minutes stopped it.
        last: its last line of output.
        run: the windows it ran under wif.watch.
        log: where its output is.
    """
    need = 1 if conf.trainer.mode is TrainerMode.loader_only else conf.trainer.warmup_epochs + 1
    if rc != 0 and UNREACHED in last:  # no figure for this setting, and why: wif.watcher.proof
        return FAILED, f"{last[last.index(UNREACHED) :]} (its output: {log})", Failure.UNREACHED
    if rc == -1:
        return FAILED, f"{last} (its output: {log})", Failure.OUT_OF_TIME
    if rc != 0:
        return FAILED, f"the command exited {rc}: {last} (its output: {log})", Failure.FAILED
    if run < need:
        return (
            FAILED,
            (
                f"{RAN_OUT} {run} window(s) under wif.watch; a measurement needs {need} (the first is its warm-up): "
                f"let the script run longer (its output: {log})"
            ),
            Failure.RAN_OUT,
        )
    return FINISHED, "", None
