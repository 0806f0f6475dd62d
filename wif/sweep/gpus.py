"""One GPU per job: the GPUs a job may use, and the lock that gives it one of them.

`claim_gpu()` locks one GPU with `flock` and pins `CUDA_VISIBLE_DEVICES` to it before the run is forked. The
lock ends with the job's processes. A job finding every GPU held is refused, never run beside another: two
timed runs on one GPU measure each other.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import psutil
from hydra.core.hydra_config import HydraConfig

from wif.config import ConfigError

LOCK_DIR_ENV = "WIF_LOCK_DIR"
DEFAULT_LOCK_DIR = "/tmp/wif-locks"  # not $TMPDIR: every job on the machine must see the same locks


class ClusterError(ConfigError):
    """A sweep or job that would share a GPU, or cannot be placed; the message says what to do."""


@functools.lru_cache(maxsize=1)
def _nvml() -> Any:
    """NVML, initialized once, or None: NVML is not CUDA, asking it never creates a CUDA context."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no driver, no GPU, no library: nothing to count
        return None


def visible_gpus() -> Optional[List[str]]:
    """The GPUs a job started here may use; None when nothing can tell, as without a driver."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [t.strip() for t in cvd.split(",") if t.strip()]
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return [str(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - NVML's errors are its own classes: any of them means it cannot tell
        return None


def gpu_identity(token: str) -> str:
    """The physical GPU behind a CUDA_VISIBLE_DEVICES entry: its NVML UUID (PCI order), else the entry."""
    if token.startswith(("GPU-", "MIG-")):
        return token
    nvml = _nvml()
    if nvml is not None and token.isdigit():
        try:
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(int(token)))
            return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except Exception:  # noqa: BLE001 - an index NVML does not know: the entry stands for itself
            pass
    return token


def lock_dir() -> Path:
    """Shared by every user's wif jobs on this machine: created world-writable and sticky, like /tmp."""
    path = Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        try:
            path.chmod(0o1777)
        except OSError:
            pass
    return path


@dataclass
class GpuClaim:
    """This process's GPU and the lock that holds it."""

    token: str  # what CUDA_VISIBLE_DEVICES now holds
    identity: str  # the physical GPU the lock is named after
    path: Path
    fd: int


_CLAIM: Optional[GpuClaim] = None


def _holder(path: Path) -> str:
    """Who holds a GPU's lock, as its file says."""
    try:
        return path.read_text().strip() or "a wif job"
    except OSError:
        return "a wif job"


def claim_gpu(candidates: Sequence[str], prefer: int = 0) -> GpuClaim:
    """Lock one GPU of `candidates` for this process and pin CUDA_VISIBLE_DEVICES to it; ClusterError if all are held.

    The tries start at `prefer`, so a batch's jobs spread over the GPUs. A process keeps its GPU for all its jobs.
    """
    global _CLAIM
    if _CLAIM is not None:
        return _CLAIM
    if not candidates:
        raise ClusterError("No GPU to claim: CUDA_VISIBLE_DEVICES names none.")
    start = prefer % len(candidates)
    held: List[str] = []
    for token in list(candidates[start:]) + list(candidates[:start]):
        identity = gpu_identity(token)
        path, fd = _try_lock(identity)
        if fd is None:
            held.append(f"GPU {token}: {_holder(path)}")
            continue
        command = " ".join(" ".join(psutil.Process().cmdline()).split())[:300]
        try:
            os.ftruncate(fd, 0)
            os.write(
                fd,
                f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                f"{command}\n".encode(),
            )
        except OSError:
            pass
        pinned = identity if identity.startswith(("GPU-", "MIG-")) else token  # the device the lock names
        os.environ["CUDA_VISIBLE_DEVICES"] = pinned
        _CLAIM = GpuClaim(pinned, identity, path, fd)
        return _CLAIM
    raise ClusterError(
        "Every GPU this job may use is running another wif job, and two timed runs on one GPU "
        "would slow each other down: " + "; ".join(held) + ". Wait until they end, or give this "
        "sweep other GPUs (CUDA_VISIBLE_DEVICES, hydra.launcher.gpus_per_node)."
    )


def _try_lock(identity: str) -> Tuple[Path, Optional[int]]:
    """(lock file, descriptor holding its lock) or (lock file, None) when another process holds it."""
    path = Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR) / (re.sub(r"[^\w.-]", "_", identity) + ".lock")
    try:
        lock_dir()  # created on first use
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:
            fd = os.open(path, os.O_RDONLY)  # another user's lock file: flock works on a read-only descriptor
    except OSError as err:
        raise ClusterError(
            f"Cannot open the GPU lock {path} ({err}): set {LOCK_DIR_ENV} to a folder every wif "
            "job on this machine can write."
        ) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return path, None
    return path, fd


def busy_gpus(candidates: Sequence[str]) -> List[str]:
    """Which of these GPUs another wif job holds now ('GPU 0: pid ... command'), without holding any."""
    busy = []
    for token in candidates:
        path, fd = _try_lock(gpu_identity(token))
        if fd is None:
            busy.append(f"GPU {token}: {_holder(path)}")
        else:
            os.close(fd)
    return busy


def release_gpu() -> None:
    """Give the claimed GPU back (tests; a job's lock otherwise ends with its processes)."""
    global _CLAIM
    if _CLAIM is not None:
        os.close(_CLAIM.fd)
        _CLAIM = None


def pin_gpu(device: str) -> Optional[str]:
    """Claim a CUDA job's GPU and pin CUDA_VISIBLE_DEVICES to it; the pinned device, or None.

    ClusterError where no GPU is free. Under SLURM the scheduler's allocation is the guarantee: nothing is locked.
    """
    if device != "cuda" or os.environ.get("SLURM_JOB_ID"):
        return None
    gpus = visible_gpus()
    if not gpus:
        return None
    prefer = 0  # one job after another: the first free GPU
    if os.environ.get("SUBMITIT_EXECUTOR"):  # jobs side by side: spread them by their place in the sweep
        try:
            prefer = int(HydraConfig.get().job.get("num", 0) or 0)
        except ValueError:
            pass
    return claim_gpu(gpus, prefer).token


def require_gpus(nproc: int, device: str) -> None:
    """On CUDA, trainer.nproc>1 needs one visible GPU per rank; it takes no GPU lock."""
    gpus = visible_gpus() if device == "cuda" else None
    if gpus is not None and len(gpus) < nproc:
        raise ConfigError(
            f"trainer.nproc={nproc} needs one GPU per rank, but {len(gpus)} are visible "
            f"({','.join(gpus)}). Lower trainer.nproc, or make more GPUs visible."
        )
