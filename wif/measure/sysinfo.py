"""The context that makes a figure reproducible: machine, software versions, code version."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Dict

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


def usable_cores() -> int:
    """Cores this process may run on (a container's or taskset's limit), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def git_commit() -> str:
    """The commit of the code that ran, with '+dirty' when the tree had local changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


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
