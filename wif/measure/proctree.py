"""A run's process tree read from /proc: its children, /dev/shm in use, and the pages it still shares with
the process it was forked from. Cheap reads, for a sampler that calls them many times a second."""

from __future__ import annotations

import os
import shutil
from typing import Dict, List, Mapping, Optional

import psutil

from wif.measure.sysinfo import read_text

SHM = "/dev/shm"


def shm_used() -> Optional[int]:
    try:
        return shutil.disk_usage(SHM).used
    except OSError:
        return None


def child_pids(pid: int) -> List[int]:
    """A process's children from /proc/PID/task/*/children: about 0.1 ms for a run's tree, where psutil's
    children() reads every process on the machine (1.5 ms here). A worker ending meanwhile is just missed."""
    pids: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids  # a worker that ended since it was listed
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as children:
                pids += [int(c) for c in children.read().split()]
        except OSError:
            continue  # a thread that ended
    return pids


HAS_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def descendants(pid: int) -> Dict[int, int]:
    """Every process below `pid`, breadth first, each with its parent, from the children files (HAS_CHILDREN_FILES)."""
    found: Dict[int, int] = {}
    pids = [pid]
    for parent in pids:  # grows while it is walked
        children = child_pids(parent)
        found.update((c, parent) for c in children)
        pids += children
    return found


def tree_processes(
    root: psutil.Process, known: Mapping[int, psutil.Process], parents: Dict[int, int]
) -> List[psutil.Process]:
    """`root` and every process below it; psutil.NoSuchProcess once `root` is gone.

    It reads the children files where the kernel has them, else psutil's children() (about 3 ms a call). Each
    process's parent goes into `parents`. `known` lends earlier Process objects, so their CPU times go on.
    """
    if not HAS_CHILDREN_FILES:
        return [root] + root.children(recursive=True)
    if not os.path.exists(f"/proc/{root.pid}"):
        raise psutil.NoSuchProcess(root.pid)
    below = descendants(root.pid)
    parents.update(below)
    procs = [root]
    for pid in below:
        try:
            procs.append(known.get(pid) or psutil.Process(pid))
        except psutil.Error:
            continue  # ended since it was listed
    return procs


# NOTE [ Pages shared with the fork's parent ]
# A run forked from the supervisor shares the pages the supervisor had: the imported libraries' heaps.
# Summed PSS over the run's tree splits them with the supervisor, and each new worker shifts more of them
# into the tree. Measured: four idle workers raised the plain sum by 157 MB, and this corrected figure by
# 6 MB. Adding the supervisor's share back counts those pages once, in full, as in a run started on its own.
# Dirty shared pages are the fork's. Library files are clean and shared with unrelated processes too, so
# they keep their plain PSS share. Kernels before 6.0 lack Pss_Dirty; there the whole shared part is used.


def fork_shared_share(parent: psutil.Process) -> int:
    """Bytes of `parent`'s PSS that are its share of the copy-on-write pages it still shares with its children.

    See NOTE [ Pages shared with the fork's parent ].
    """
    fields: Dict[str, int] = {}
    for line in read_text(f"/proc/{parent.pid}/smaps_rollup").splitlines():  # "": gone, so 0
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0]) * 1024
    if "Pss_Dirty" in fields:
        return max(fields["Pss_Dirty"] - fields.get("Private_Dirty", 0), 0)
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return max(fields.get("Pss", 0) - private, 0)
