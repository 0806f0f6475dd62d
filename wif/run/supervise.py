"""One run in a process of its own, watched from outside: the forked child that trains, and its supervisor.

The supervising process (the one Hydra runs) has imported torch but never initializes CUDA, never
loads data and never runs torch compute (its thread pools do not survive a fork); each run is a child
forked from it, so a run starts in milliseconds yet owns its memory high-water marks, CUDA context and
DataLoader workers, and a hard crash of the run cannot take the sweep down. The child sends its figures
through a pipe; the supervisor samples the child's process tree, hands each message to the run's record
(`wif.run.record`: MLflow, the progress line, the stopping rule) and returns the run's outcome and summary.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from wif.config import Config, ConfigError, Device, UserCodeError
from wif.config.exits import describe
from wif.data.formats.splits import cold_verdict
from wif.measure.contention import HostCpuMeter
from wif.measure.lifetime import die_with_parent, how_it_ended, said_if_raised, stop_tree
from wif.measure.nvml import memory_baselines
from wif.measure.sampler import TreeSampler
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.run.forking import forked_run_threads
from wif.run.record import RunRecord, stop_rule
from wif.run.stopping import read_between
from wif.run.training import train

INTERRUPT_GRACE_S = 5.0
REFUSED = "REFUSED"  # an Outcome's status, never a run's: no MLflow run was created


def cuda_present() -> bool:
    """Ask NVML, not the CUDA runtime: this process forks runs and must never hold a CUDA context."""
    import torch

    if not torch.backends.cuda.is_built():
        return False
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.is_available()


def resolve_device(requested: Device) -> str:
    cuda = cuda_present()
    if requested is Device.cuda and not cuda:
        raise ConfigError(
            "device=cuda, but this machine has no usable CUDA device (or this torch build has no "
            "CUDA). Use device=auto or device=cpu."
        )
    return "cuda" if requested is not Device.cpu and cuda else "cpu"


def interrupt(signum: int, frame: Any) -> None:
    """SIGTERM (a scheduler, `kill`) ends a run the way Ctrl-C does: marked KILLED, workers stopped."""
    raise KeyboardInterrupt


def _quiet_in_forked_children() -> None:
    """A process the run forks (a DataLoader worker) is ended by the run, not by the signal that interrupts the
    run: SIGTERM ends it at once (the run's `interrupt` would raise, and a worker still in multiprocessing's
    start-up prints that as a traceback) and Ctrl-C, which reaches the whole group, leaves it to the run."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # forked from a thread other than the main one: signal handlers cannot be set there
        pass


# ----------------------------------------------------------------------------- the child
def _child_main(conf: Config, device: str, conn: Any, supervisor: int) -> None:
    """Runs in the forked child: train, send everything through the pipe, never touch MLflow; dies with
    the supervisor, even one killed with SIGKILL."""
    die_with_parent(supervisor)
    import torch

    forked_run_threads()

    signal.signal(signal.SIGTERM, interrupt)
    os.register_at_fork(after_in_child=_quiet_in_forked_children)

    def emit(kind: str, payload: Dict[str, Any]) -> Any:
        conn.send((kind, payload))
        if kind == "epoch":
            return conn.recv()  # wait while the supervisor logs (and, under epochs=auto, decides): never in an epoch
        return None

    try:
        train(conf, torch.device("cuda", 0) if device == "cuda" else torch.device("cpu"), emit)
    except BaseException as err:  # noqa: BLE001 - everything must reach the supervisor, even Ctrl-C
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):  # a second signal must not cut this short
            signal.signal(sig, signal.SIG_IGN if sig != signal.SIGCHLD else signal.SIG_DFL)
        name, message = describe(err, conf.loader.num_workers)
        conn.send(
            (
                "error",
                {
                    "type": name,
                    "message": message,
                    "traceback": traceback.format_exc(),
                    "bad_setting": isinstance(err, ConfigError),
                    "user_code": isinstance(err, UserCodeError),
                },
            )
        )
        raise SystemExit(1) from None


# ----------------------------------------------------------------------------- the supervisor
@dataclass
class Outcome:
    status: str = FAILED  # or REFUSED: the user's dataset factory failed in the run's process, no record opened
    error: Optional[Dict[str, Any]] = None
    summary: Dict[str, float] = field(default_factory=dict)
    run_id: Optional[str] = None  # the MLflow run, once opened


def supervise(
    conf: Config, device: str, tracker: Tracker, open_run: Callable[[], str], label: str, tags: Dict[str, str]
) -> Outcome:
    """Fork the run and watch it. Its MLflow record (`open_run`) is created once its process has built the
    data: a dataset factory that fails or returns the wrong thing is REFUSED with no record, and called once."""
    tr = conf.trainer  # auto_target=auto: the cell's earlier runs, read once before the fork, never in an epoch
    auto = tr.auto and tr.auto_target == "auto"
    between = read_between(tracker.client, tracker.experiment_id, tags) if auto else None
    ctx = mp.get_context("fork")
    conn, child_end = ctx.Pipe()
    target = _child_main
    if conf.trainer.nproc > 1:  # several ranks (wif.run.ddp): torch's elastic launcher, imported only for them
        from wif.run.ddp.launch import launch_main

        target = launch_main
    proc = ctx.Process(
        target=said_if_raised, args=(target, child_end, conf, device, child_end, os.getpid()), name=f"wif-run {label}"
    )  # a Python error outside the run's own reporting: its reason too
    baselines = memory_baselines() if device == "cuda" else {}  # before the run's CUDA context and uploads exist
    t_spawn = time.monotonic()
    proc.start()
    child_end.close()
    sampler = TreeSampler(proc.pid, conf.measure, baselines)
    sampler.start()
    meter = HostCpuMeter(proc.pid)
    meter.mark()
    run = RunRecord(conf, tracker, open_run, label, sampler, meter, rule=stop_rule(tr, between), t_spawn=t_spawn)
    t_end = 0.0
    try:
        while proc.is_alive() or conn.poll():
            if conn.poll(0.2):
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    break
                run.on_message(kind, payload)
                if kind == "epoch":
                    conn.send(run.answer())
                elif kind == "result":
                    t_end = time.monotonic()
    except KeyboardInterrupt:
        proc.join(INTERRUPT_GRACE_S)  # Ctrl-C reached the run too: let it end by itself first
        stop_tree(sampler.seen())
        proc.join()
        sampler.stop()
        return Outcome(
            KILLED,
            {"type": "KeyboardInterrupt", "message": "interrupted (Ctrl-C, SIGTERM, or SIGUSR2)"},
            run_id=run.open(),
        )
    proc.join()
    sampler.stop()
    stop_tree(sampler.seen())  # DataLoader workers outliving a crashed run
    if run.done and proc.exitcode == 0:
        cold = cold_verdict(run.epochs, conf.trainer.warmup_epochs)  # data.page_cache=cold: was it? (formats.md)
        tracker.set_tags(run.open(), {"wif.stop_reason": run.stop_reason(), **(cold or {}), **sampler.gpu_tags()})
        summary = run.summary(t_end)
        summary["sampler_cpu_pct"] = sampler.own_cost_pct()
        return Outcome(FINISHED, summary=summary, run_id=run.run_id)
    error = run.error or {
        "type": "ProcessDied",
        "message": f"the run's process {how_it_ended(proc.exitcode)}",
        "traceback": "",
    }
    if run.run_id is None and error.get("user_code"):
        return Outcome(REFUSED, error)  # no record: the user's dataset factory, as the check before the fork was
    return Outcome(KILLED if error["type"] == "KeyboardInterrupt" else FAILED, error, run_id=run.open())
