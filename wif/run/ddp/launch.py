"""The run process of a data-parallel job: the launcher starts the ranks, and a relay carries their messages.

The launcher is PyTorch's elastic one, what `torchrun` runs. The supervisor forks this process as it forks a
one-process run and reads the same pipe. So all it measures and every way a run ends work unchanged. Rank 0
sends the job's figures. Any rank may send the error that ended it; the first one is the run's reason.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import secrets
import signal
import threading
import traceback
import uuid
from multiprocessing.connection import Connection, Listener, wait
from typing import Any, Dict, List, Optional

from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from wif.config import Config
from wif.measure.lifetime import die_with_parent
from wif.measure.sysinfo import usable_cores
from wif.run.ddp.rank import RankLink, rank_main

# NOTE [ The launcher's shutdown grace ]
# The launcher stops its ranks with SIGTERM, then SIGKILL after SHUTDOWN_S; PyTorch's default is 30 s. A rank
# blocked in a collective cannot run its SIGTERM handler, and its workers die with it (PR_SET_PDEATHSIG).
# Only a torch whose LaunchConfig has shutdown_timeout, newer than 2.11, takes it; an older one keeps 30 s.
SHUTDOWN_S = 2
ERROR_WINDOW_S = 1.0  # after a rank's error, the others' that arrive this soon are compared with it
RELAY_DRAIN_S = 10.0  # after the ranks end: their last messages still reach the supervisor


def launch_config(nproc: int) -> LaunchConfig:
    """The elastic launcher's settings for one node of `nproc` ranks; `shutdown_timeout` only where torch takes it."""
    options: Dict[str, Any] = dict(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(),
    )
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        options["shutdown_timeout"] = SHUTDOWN_S
    return LaunchConfig(**options)


def threads_per_rank(nproc: int, cores: Optional[int] = None) -> int:
    """torch's intra-op threads for each rank: the usable cores shared out; torchrun sets 1 unless told."""
    return max(1, (cores or usable_cores()) // nproc)


class Relay(threading.Thread):
    """Ranks -> supervisor: forwards what the ranks send, and carries the supervisor's answer back to rank 0.

    It accepts one connection per rank, and forwards only the first error: a dead peer fails the others.
    """

    def __init__(self, listener: Listener, pipe: Connection, nproc: int) -> None:
        super().__init__(name="wif-ddp-relay", daemon=True)
        self.listener, self.pipe, self.nproc = listener, pipe, nproc
        self.ranks: List[Connection] = []
        self.lock = threading.Lock()
        self.failed = False
        self.stopped = threading.Event()  # the launch is over: once no rank is connected, the relay ends
        threading.Thread(target=self._accept, name="wif-ddp-accept", daemon=True).start()

    def _accept(self) -> None:
        for _ in range(self.nproc):
            try:
                self.ranks.append(self.listener.accept())
            except OSError:
                return  # closed: the launch is over

    def say(self, kind: str, payload: Dict[str, Any]) -> None:
        """Send a message to the supervisor; an error only if it is the first."""
        with self.lock:
            if kind == "error":
                if self.failed:
                    return
                self.failed = True
            self.pipe.send((kind, payload))

    def _first_error(self, error: Dict[str, Any], others: List[Connection]) -> Dict[str, Any]:
        """The error raised first among those within ERROR_WINDOW_S: a peer's failure may come first."""
        errors = [error]
        for conn in wait(others, timeout=ERROR_WINDOW_S) if others else []:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                continue
            if kind == "error":
                errors.append(payload)
        return min(errors, key=lambda e: e.get("t", float("inf")))

    def run(self) -> None:
        """Relay until every rank has hung up, or the launch is over with no rank connected."""
        done: set = set()
        while len(done) < self.nproc:
            live = [c for c in list(self.ranks) if id(c) not in done]
            if not live:  # no rank connected yet (they start in seconds), or every one gone: never spin
                if self.stopped.wait(0.2):
                    return
                continue
            for conn in wait(live, timeout=0.2):
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    done.add(id(conn))
                    continue
                if kind == "error":
                    payload = self._first_error(payload, [c for c in live if c is not conn])
                self.say(kind, payload)
                if kind == "epoch":
                    conn.send(self.pipe.recv())  # the supervisor's answer (GO_ON / STOP) to rank 0


def launch_main(conf: Config, device: str, pipe: Connection, supervisor: int) -> None:
    """The forked run process of trainer.nproc>1: launch, relay, and say how the ranks ended.

    Args:
        conf: the run's configuration.
        device: "cuda" or "cpu".
        pipe: the run process's end of the supervisor's pipe.
        supervisor: the supervisor's pid.
    """
    die_with_parent(supervisor)
    # The rank says the run's reason in one line: the launcher's own tracebacks are shown only when critical.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    nproc = conf.trainer.nproc
    threads = threads_per_rank(nproc)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the ranks' OpenMP pools, before they import torch
    authkey = secrets.token_bytes(16)
    listener = Listener(family="AF_UNIX", authkey=authkey)
    relay = Relay(listener, pipe, nproc)
    relay.start()
    code = 0
    try:
        link = RankLink(
            device_type=device,
            address=listener.address,
            authkey=authkey,
            threads=threads,
            agent=os.getpid(),
            start_method=multiprocessing.get_start_method(),
        )
        elastic_launch(launch_config(nproc), rank_main)(conf, link)
    except (KeyboardInterrupt, Exception) as err:  # noqa: BLE001 - the launcher's own error is the run's reason
        code = say_launch_failure(relay, err)
    relay.stopped.set()
    relay.join(RELAY_DRAIN_S)
    listener.close()
    if code:
        raise SystemExit(code)


def say_launch_failure(relay: Relay, err: BaseException) -> int:
    """Say in one line why the launch failed; returns the run process's exit code."""
    error, code = {"traceback": "", "bad_setting": False}, 1  # the rank's own traceback is in the job's log
    if isinstance(err, ChildFailedError):
        rank, failure = err.get_first_failure()
        error.update(type="RankFailed", message=f"rank {rank} ended with exit code {failure.exitcode}")
    elif isinstance(err, (KeyboardInterrupt, SignalException)):  # SIGINT/SIGTERM reach the launcher as SignalException
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        error.update(type="KeyboardInterrupt", message=f"interrupted ({type(err).__name__}: {err})")
        code = 130
    else:
        error.update(type=type(err).__name__, message=f"the launcher: {err}", traceback=traceback.format_exc())
    relay.say("error", error)
    return code
