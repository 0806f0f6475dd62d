"""One run in a process of its own, watched from outside: the forked child that trains, and its supervisor.

The supervisor, the process Hydra runs, never initializes CUDA, loads data or runs torch compute: its thread
pools do not survive a fork. So a run forks in milliseconds, owns its memory peaks, CUDA context and workers,
and cannot take the sweep down. The supervisor samples the child's tree and hands each message the child
pipes to the run's record (`wif.run.record`). It returns the run's outcome and summary.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from wif.config import Config
from wif.data.formats.splits import cold_verdict
from wif.measure import names
from wif.measure.contention import HostCpuMeter
from wif.measure.lifetime import die_with_parent, how_it_ended, said_if_raised, stop_tree
from wif.measure.nvml import memory_baselines
from wif.measure.sampler import TreeSampler
from wif.measure.tracking import FAILED, FINISHED, KILLED, Tracker
from wif.run.forking import forked_run_threads, freeze_for_run, interrupt, said_error, thaw_after_run
from wif.run.noise import read_between
from wif.run.record import RunRecord, stop_rule
from wif.run.training import train

INTERRUPT_GRACE_S = 5.0
REFUSED = "REFUSED"  # an Outcome's status, never a run's: no MLflow run was created


def _quiet_in_forked_children() -> None:
    """Leave a process the run forks, such as a DataLoader worker, to be ended by the run, without a traceback."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # forked from a thread other than the main one: signal handlers cannot be set there
        pass


def _child_main(conf: Config, device: str, conn: Any, supervisor: int) -> None:
    """Train in the forked child, sending everything through the pipe; never touch MLflow.

    The child dies with the supervisor, even one killed with SIGKILL.

    Args:
        conf: the run's configuration.
        device: "cuda" or "cpu".
        conn: the child's end of the pipe.
        supervisor: the supervisor's pid.
    """
    die_with_parent(supervisor)
    import torch

    forked_run_threads()

    signal.signal(signal.SIGTERM, interrupt)
    os.register_at_fork(after_in_child=_quiet_in_forked_children)

    def emit(kind: str, payload: Dict[str, Any]) -> Any:
        """Send a message; after an epoch, wait for the supervisor's answer."""
        conn.send((kind, payload))
        if kind == "epoch":
            return conn.recv()  # wait while the supervisor logs (and, under epochs=auto, decides): never in an epoch
        return None

    try:
        train(conf, torch.device("cuda", 0) if device == "cuda" else torch.device("cpu"), emit)
    except BaseException as err:  # noqa: BLE001 - everything must reach the supervisor, even Ctrl-C
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.send(("error", said_error(err, conf.loader.num_workers)))
        raise SystemExit(1) from None


@dataclass
class Outcome:
    """How a supervised run ended, its summary, and its MLflow record."""

    status: str = FAILED  # or REFUSED: the user's dataset factory failed in the run's process, no record opened
    error: Optional[Dict[str, Any]] = None
    summary: Dict[str, float] = field(default_factory=dict)
    run_id: Optional[str] = None  # the MLflow run, once opened


@dataclass
class Child:
    """The forked run as its supervisor holds it: the process, its pipe, and what samples it from outside."""

    proc: Any  # a multiprocessing Process
    conn: Any  # the supervisor's end of the pipe
    sampler: TreeSampler
    meter: HostCpuMeter
    t_spawn: float  # time.monotonic() just before the fork


def supervise(
    conf: Config, device: str, tracker: Tracker, open_run: Callable[[], str], label: str, tags: Dict[str, str]
) -> Outcome:
    """Fork the run and watch it.

    Its MLflow record (`open_run`) is created once its process has built the data. A dataset factory that
    fails or returns the wrong thing is REFUSED with no record, and called once.

    Args:
        conf: the run's configuration.
        device: "cuda" or "cpu".
        tracker: the MLflow store the record goes to.
        open_run: creates the run's MLflow record.
        label: the run's name in the progress lines.
        tags: the run's tags; auto_target=auto reads its cell's earlier runs by them.
    """
    tr = conf.trainer  # auto_target=auto: the cell's earlier runs, read once before the fork, never in an epoch
    between = (
        read_between(tracker.client, tracker.experiment_id, tags) if tr.auto and tr.auto_target == "auto" else None
    )
    freeze_for_run()  # until the run has ended, whatever ends it
    try:
        child = start_child(conf, device, label)
        run = RunRecord(
            conf=conf,
            tracker=tracker,
            open_run=open_run,
            label=label,
            sampler=child.sampler,
            meter=child.meter,
            rule=stop_rule(tr, between),
            t_spawn=child.t_spawn,
        )
        try:
            t_end = relay_messages(child, run)
        except KeyboardInterrupt:
            return stop_interrupted(child, run)
        end_child(child)
        return outcome(child, run, t_end=t_end)
    finally:
        thaw_after_run()


def start_child(conf: Config, device: str, label: str) -> Child:
    """Fork the run's process, then start sampling its process tree and the host's CPU."""
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
    return Child(proc=proc, conn=conn, sampler=sampler, meter=meter, t_spawn=t_spawn)


def relay_messages(child: Child, run: RunRecord) -> float:
    """Hand each message of the run to its record, and answer each epoch; returns when the result came."""
    proc, conn = child.proc, child.conn
    t_end = 0.0
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
    return t_end


def stop_interrupted(child: Child, run: RunRecord) -> Outcome:
    """Ctrl-C or SIGTERM: the run, which got it too, ends by itself first, then its whole tree is stopped."""
    child.proc.join(INTERRUPT_GRACE_S)
    stop_tree(child.sampler.seen())
    child.proc.join()
    child.sampler.stop()
    return Outcome(
        status=KILLED,
        error={"type": "KeyboardInterrupt", "message": "interrupted (Ctrl-C, SIGTERM, or SIGUSR2)"},
        run_id=run.open(),
    )


def end_child(child: Child) -> None:
    """Wait for the run's process, stop sampling, and stop DataLoader workers that outlived a crashed run."""
    child.proc.join()
    child.sampler.stop()
    stop_tree(child.sampler.seen())


def outcome(child: Child, run: RunRecord, t_end: float) -> Outcome:
    """The ended run's summary and final tags, else its error; `t_end` is when its result came (0: none)."""
    if run.done and child.proc.exitcode == 0:
        cold = cold_verdict(run.epochs, run.conf.trainer.warmup_epochs)  # data.page_cache=cold: was it? (formats.md)
        tags = {names.TAG_STOP_REASON: run.stop_reason(), **(cold or {}), **child.sampler.gpu_tags()}
        run.tracker.set_tags(run.open(), tags)
        summary = run.summary(t_end)
        summary[names.SAMPLER_CPU_PCT] = child.sampler.own_cost_pct()
        return Outcome(status=FINISHED, summary=summary, run_id=run.run_id)
    error = run.error or {
        "type": "ProcessDied",
        "message": f"the run's process {how_it_ended(child.proc.exitcode)}",
        "traceback": "",
    }
    if run.run_id is None and error.get("user_code"):
        return Outcome(status=REFUSED, error=error)  # no record: the user's dataset factory failed in the run
    status = KILLED if error["type"] == "KeyboardInterrupt" else FAILED
    return Outcome(status=status, error=error, run_id=run.open())
