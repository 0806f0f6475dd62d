"""Sweeps beyond one GPU: where each job ran, and the guard that keeps two timed runs off one GPU.

`cluster_tags()` says where a job ran. `ClusterCallback`, the Hydra callback of `hydra/launcher=local_gpus`
and `=slurm`, gives each job one GPU of its own (`wif.sweep.gpus.claim_gpu()`) and checks the sweep first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence
from urllib.parse import urlparse

import psutil
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from wif.config.exits import EXIT_BAD_SETTING
from wif.sweep.gpus import ClusterError, busy_gpus, claim_gpu, visible_gpus

log = logging.getLogger("wif")

# How a study's process shows in its command line: the checkout's script, the console script, the module.
STUDY_COMMANDS = ("train.py", "wif-study", "wif.sweep.study")
# Launchers whose train.py process only submits jobs and waits: not a job itself.
SUBMITTING_LAUNCHERS = ("slurm", "slurm_ddp", "local_gpus", "submitit_slurm", "submitit_local")
# Environment -> tag: what identifies the job to its scheduler.
JOB_ENV_TAGS = (
    ("SLURM_JOB_ID", "wif.slurm_job_id"),
    ("SLURM_ARRAY_JOB_ID", "wif.slurm_array_job_id"),
    ("SLURM_ARRAY_TASK_ID", "wif.slurm_array_task_id"),
    ("SLURM_JOB_PARTITION", "wif.slurm_partition"),
    ("SUBMITIT_LOCAL_JOB_ID", "wif.submitit_job_id"),
)


def launcher_name() -> str:
    """The hydra/launcher choice (basic, slurm, local_gpus, ...), or submitit's executor outside Hydra."""
    try:
        choice = HydraConfig.get().runtime.choices.get("hydra/launcher")
        if choice:
            return str(choice)
    except ValueError:  # not inside a Hydra job
        pass
    executor = os.environ.get("SUBMITIT_EXECUTOR")
    return f"submitit_{executor}" if executor else "none"


def is_job_command(cmdline: Sequence[str]) -> bool:
    """Whether this command line runs wif jobs: a study under the basic launcher, or one submitit job.

    A study that only submits jobs to a submitit launcher and waits for them does not count.
    """
    if len(cmdline) < 2 or not Path(cmdline[0]).name.startswith("python"):  # not `srun python ...` itself
        return False
    if "submitit.core._submit" in cmdline:
        return True
    if not any(Path(arg).name in STUDY_COMMANDS for arg in cmdline[1:]):
        return False
    launchers = [arg.split("=", 1)[1] for arg in cmdline if arg.startswith("hydra/launcher=")]
    return not any(name in SUBMITTING_LAUNCHERS for name in launchers)


def job_processes() -> Dict[int, int]:
    """The processes on this node that each stand for one running wif job, as {pid: parent pid}.

    A process counts where its command line `is_job_command` and its parent's does not: runs and workers inherit it.
    """
    cmd: Dict[int, Sequence[str]] = {}
    parent: Dict[int, int] = {}
    for p in psutil.process_iter(["pid", "ppid", "cmdline"], ad_value=None):
        cmd[p.info["pid"]] = p.info.get("cmdline") or []
        parent[p.info["pid"]] = p.info.get("ppid") or 0
    return {
        pid: parent[pid] for pid, c in cmd.items() if is_job_command(c) and not is_job_command(cmd.get(parent[pid], []))
    }


def node_jobs() -> int:
    """How many wif jobs run on this node now, this one included; a caller outside a job, such as a test, is one."""
    jobs = job_processes()
    me = psutil.Process()
    if me.pid in jobs or any(p.pid in jobs for p in me.parents()):
        return len(jobs)
    return len(jobs) + 1


def cluster_tags() -> Dict[str, str]:
    """Tags of where the run ran: node, launcher, scheduler job ids, visible GPUs, and `wif.node_jobs` beside it."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # SLURM's name, as `sinfo`/`sacct` show it
    tags = {"wif.node": node, "wif.launcher": launcher_name(), "wif.node_jobs": str(node_jobs())}
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:  # "" is meaningful: no GPU visible (submitit's CPU jobs)
        tags["wif.cuda_visible_devices"] = cvd
    for env, key in JOB_ENV_TAGS:
        if os.environ.get(env):
            tags[key] = os.environ[env]
    return tags


def check_gpu_parallelism(parallel: Optional[int], gpus: Optional[int], what: str = "the sweep") -> None:
    """Refuse more jobs at once than GPUs: two timed runs on one GPU measure each other, not the loaders.

    `parallel` None means every job of the sweep at once; `gpus` None means the GPUs cannot be counted.
    """
    if gpus is not None and gpus < 1:
        raise ClusterError(f"{what} runs one job per GPU, and there is no GPU to run on (none visible).")
    if gpus is not None and (parallel is None or parallel > gpus):
        at_once = "every job at once" if parallel is None else f"{parallel} jobs at once"
        raise ClusterError(
            f"{what} would run {at_once} on {gpus} GPU(s), so two timed runs would share a GPU. "
            f"Run at most {gpus} at once: hydra/launcher=local_gpus runs one job per GPU "
            f"(leave hydra.sweeper.max_batch_size unset, or at most {gpus})."
        )


class ClusterCallback(Callback):
    """Named by hydra/launcher=local_gpus and =slurm (hydra.callbacks.wif_cluster).

    At the sweep's start it opens the store once, so parallel jobs do not race to create it. With `pin_gpus` it
    refuses more parallel jobs than GPUs and batches one job per GPU; each job claims one GPU at its start. Hydra
    turns a callback's exceptions into warnings, so a refusal logs its message and exits instead.
    """

    def __init__(self, pin_gpus: bool = False) -> None:
        self.pin_gpus = pin_gpus

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Open the store; with `pin_gpus`, plan one job per GPU."""
        with _refusal():
            open_store(config)
            if self.pin_gpus:
                plan_local_gpus(config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """With `pin_gpus`, claim one of the GPUs submitit gave this sweep."""
        if not self.pin_gpus:
            return
        gpus = visible_gpus()
        if gpus:  # submitit set CUDA_VISIBLE_DEVICES to this sweep's GPUs
            with _refusal():
                claim = claim_gpu(gpus, prefer=int(config.hydra.job.get("num", 0) or 0))
            log.info("GPU %s claimed for this job (CUDA_VISIBLE_DEVICES=%s)", claim.identity, claim.token)


@contextlib.contextmanager
def _refusal() -> Iterator[None]:
    """A ClusterError becomes its message and exit 2."""
    try:
        yield
    except ClusterError as err:
        log.error("Refused: %s", err)
        raise SystemExit(EXIT_BAD_SETTING) from None


def open_store(config: DictConfig) -> None:
    """Open the sweep's store once, before any job: a server that answers, SQLite's schema and experiment made now."""
    from wif.measure.tracking import Tracker
    from wif.sweep.callback import refuse_silent_store

    uri, experiment = str(config.tracking.uri), str(config.tracking.experiment)
    refuse_silent_store(config)  # where this callback runs before the sweep's
    if urlparse(uri).scheme == "sqlite" and str(config.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher"):
        log.warning(
            "tracking.uri=%s is a SQLite file: jobs on many nodes writing it over a shared file system "
            "hit lock errors. Start an MLflow server and pass tracking.uri=http://HOST:PORT "
            "(docs/cluster.md).",
            uri,
        )
    try:
        Tracker(uri, experiment)
    except Exception as err:  # noqa: BLE001 - whatever it is, every job would fail on it the same way
        raise ClusterError(
            f"Cannot open the tracking store {uri} ({type(err).__name__}: {err}); no job was started."
        ) from err


def plan_local_gpus(config: DictConfig) -> int:
    """With hydra/launcher=local_gpus, before any job: N GPUs, N jobs per batch, GPUs handed to the jobs.

    Submitit's local executor starts a batch's jobs at once, and Hydra waits for a batch before the next. So N jobs
    per batch on N GPUs, each claiming one in on_job_start, is one job per GPU.
    """
    hydra = config.hydra
    visible = visible_gpus()
    wanted = hydra.launcher.get("gpus_per_node")
    if wanted is None:
        if visible is None:
            raise ClusterError(
                "hydra/launcher=local_gpus cannot count this machine's GPUs (no NVML, no "
                "CUDA_VISIBLE_DEVICES): pass hydra.launcher.gpus_per_node=N."
            )
        wanted = len(visible)
    wanted = int(wanted)
    if visible is not None and wanted > len(visible):
        raise ClusterError(
            f"hydra.launcher.gpus_per_node={wanted}, but this machine shows {len(visible)} GPU(s) "
            f"({','.join(visible) or 'none'}): two timed jobs would share a GPU. Pass at most "
            f"{len(visible)}, or use the default launcher (one job after another)."
        )
    batch = hydra.sweeper.get("max_batch_size")
    check_gpu_parallelism(batch if batch is not None else wanted, wanted, "hydra/launcher=local_gpus")
    busy = busy_gpus(visible[:wanted] if visible is not None else [str(i) for i in range(wanted)])
    if busy:
        raise ClusterError(
            "GPUs this sweep would use are running other wif jobs: " + "; ".join(busy) + ". Wait "
            "until they end, or use fewer or other GPUs (hydra.launcher.gpus_per_node, "
            "CUDA_VISIBLE_DEVICES)."
        )
    with read_write(hydra), open_dict(hydra.launcher):
        hydra.launcher.gpus_per_node = wanted
        hydra.sweeper.max_batch_size = batch if batch is not None else wanted
        if visible is not None and visible[:wanted] != [str(i) for i in range(wanted)]:
            # submitit gives every job GPUs 0..N-1; `setup` lines run first, so hand over this shell's GPUs
            setup = list(hydra.launcher.setup or []) if "setup" in hydra.launcher else []
            hydra.launcher.setup = setup + [f"export CUDA_VISIBLE_DEVICES={','.join(visible[:wanted])}"]
    log.info("local_gpus: %d job(s) at a time, one per GPU", hydra.sweeper.max_batch_size)
    return wanted
