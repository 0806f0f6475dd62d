"""The context that makes a figure reproducible: machine, software versions, code version."""

from __future__ import annotations

import functools
import math
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional

import psutil

from wif.measure import names

PACKAGES = (
    "torch",
    "torchvision",
    "numpy",
    "hydra-core",
    "omegaconf",
    "mlflow",
    "prefetch_generator",
    "psutil",
    "nvidia-ml-py",
)


CGROUP = "/sys/fs/cgroup"
PERIOD_US = 100_000  # the kernel's default CFS period


def own_cpus() -> Optional[FrozenSet[int]]:
    """The CPUs this process may run on (taskset, a container's or a job's cpuset); None off Linux."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None


def usable_cores() -> int:
    """Cores this process may use: its CPUs (`own_cpus`), capped by its cgroup's CPU quota rounded up."""
    cpus = own_cpus()
    cores = len(cpus) if cpus else (os.cpu_count() or 1)
    quota = cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cpu_quota(folders: Optional[List[str]] = None) -> Optional[float]:
    """The CPUs' worth of time this process's cgroup may use; None without a cap or a cgroup to read.

    It reads cgroup v2's cpu.max, or v1's quota over period, in the first of `folders` that has them.
    """
    for folder in _cgroup_folders() if folders is None else folders:
        v2 = read_text(os.path.join(folder, "cpu.max")).split()
        if v2:
            return None if v2[0] == "max" else int(v2[0]) / int(v2[1] if len(v2) > 1 else PERIOD_US)
        quota = read_text(os.path.join(folder, "cpu.cfs_quota_us"))
        if quota:
            period = read_text(os.path.join(folder, "cpu.cfs_period_us")) or PERIOD_US
            return None if int(quota) <= 0 else int(quota) / int(period)
    return None


def _cgroup_folders() -> List[str]:
    """Where this process's cgroup keeps its CPU controller's files, v2 and v1, from /proc/self/cgroup."""
    out = []
    for line in read_text("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:  # v2's one hierarchy
            out.append(CGROUP + path)
        elif "cpu" in controllers.split(","):
            out += [f"{CGROUP}/{controllers}{path}", f"{CGROUP}/cpu{path}"]
    return [*dict.fromkeys([*(f.rstrip("/") for f in out), CGROUP, f"{CGROUP}/cpu"])]  # a namespace's root too


def read_text(path: str) -> str:
    """The file's text, stripped; "" where it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in read_text("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def git_commit() -> str:
    """The commit of the code that ran, with '+dirty' when the tree had local changes."""
    try:
        sha, dirty = _git("rev-parse", "HEAD"), _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def _git(*args: str) -> str:
    """The output of `git *args` in this package's folder, stripped."""
    here = Path(__file__).resolve().parent
    return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5).stdout.strip()


@functools.lru_cache(maxsize=1)
def host_tags() -> Dict[str, str]:
    """Computed once per process: the same for every job of a sweep."""
    import torch

    tags = {
        names.TAG_HOST: socket.gethostname(),
        "wif.cpu": _cpu_model(),
        "wif.cpu_logical_cores": str(psutil.cpu_count(logical=True)),
        "wif.ram_total_gb": f"{psutil.virtual_memory().total / 1024**3:.1f}",
        "wif.python": platform.python_version(),
        "wif.torch_cuda": str(torch.version.cuda),
        "wif.git_commit": git_commit(),
    }
    tags.update({f"wif.version.{pkg}": _version(pkg) for pkg in PACKAGES})
    return tags
