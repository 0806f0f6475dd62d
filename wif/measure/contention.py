"""How much CPU other processes took on the run's CPUs while a run was measured.

A run sharing its cores is slower for reasons unrelated to its settings. The machine's busy time comes from
/proc/stat, less the job's own tree and supervisor. It is read only at epoch boundaries, over the CPUs the
run may use: its affinity or cpuset.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Mapping, Optional

import psutil

from wif.measure import names
from wif.measure.proctree import tree_processes
from wif.measure.sysinfo import own_cpus

PROC_STAT = "/proc/stat"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice. Busy is all but
# idle and iowait; guest time is already inside user and nice.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
MACHINE = psutil.cpu_count() or 1
_CPUS = own_cpus()
OWN = None if _CPUS is None or len(_CPUS) >= MACHINE else _CPUS  # None: every CPU of the machine
CORES = len(OWN) if OWN else MACHINE  # the cores others can share with the run


def machine_busy_s(cpus: Optional[FrozenSet[int]] = OWN) -> Optional[float]:
    """CPU seconds the run's CPUs (`cpus`; None: every core of the machine, /proc/stat's cpu line) have spent
    busy since boot; None where /proc/stat is missing."""
    try:
        with open(PROC_STAT) as stat:
            lines = [stat.readline()] if cpus is None else stat.read().splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if cpus is None or (name[3:].isdigit() and name.startswith("cpu") and int(name[3:]) in cpus):
            busy += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    return busy / _TICKS


def tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds of `root`, its live descendants, and the ended workers each of them has reaped."""
    try:
        tree = tree_processes(root, known={}, parents={})
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in tree:
        try:
            t = process.cpu_times()
        except psutil.Error:
            continue  # ended since it was listed: its time is now in its parent's children times
        total += t.user + t.system + t.children_user + t.children_system
    return total


def is_contended(figures: Mapping[str, Optional[float]], threshold_pct: float) -> bool:
    """Whether others took more than `threshold_pct` of each core the run left idle (at least one core)."""
    other, idle = figures.get(names.HOST_OTHER_CPU_PCT), figures.get(names.HOST_IDLE_CORES)
    return other is not None and other > threshold_pct * max(1.0 if idle is None else idle, 1.0)


@dataclass(frozen=True)
class _Mark:
    t: float
    busy_s: Optional[float]
    ours_s: float  # the job's tree (the run's, or all its ranks') and the supervisor
    tree_s: float  # the run's tree alone


class HostCpuMeter:
    """Marks taken at epoch boundaries; the CPU share others used between any two of them.

    The run is `root_pid`'s tree, or a distributed job's `job_pid`'s: a sibling rank is never another's.
    """

    def __init__(self, root_pid: int, job_pid: Optional[int] = None) -> None:
        self.root = psutil.Process(root_pid)
        self.job = psutil.Process(job_pid) if job_pid not in (None, root_pid) else None
        self.me = psutil.Process()  # the supervisor: its sampler thread and MLflow calls are the job's own
        outer = self.job or self.root
        # wif.watch meters its own process: it is in the tree, counted once
        self.me_inside = self.me.pid == outer.pid or any(p.pid == outer.pid for p in self.me.parents())
        self.marks: List[_Mark] = []

    def mark(self) -> None:
        tree = tree_cpu_s(self.root)
        ours = tree if self.job is None else tree_cpu_s(self.job)
        if not self.me_inside:
            times = self.me.cpu_times()
            ours += times.user + times.system
        self.marks.append(_Mark(time.monotonic(), machine_busy_s(), ours, tree))

    def tree_s(self, first: int, last: int) -> float:
        """CPU seconds the run's own processes used between marks `first` and `last`, exact, ended workers included."""
        return max(self.marks[last].tree_s - self.marks[first].tree_s, 0.0)

    def others(self, first: int, last: int) -> Dict[str, float]:
        """Others' CPU (% of a core) and the cores left idle between marks `first` and `last`; {} without /proc/stat."""
        a, b = self.marks[first], self.marks[last]
        if a.busy_s is None or b.busy_s is None or b.t <= a.t:
            return {}
        ours_s, span = b.ours_s - a.ours_s, b.t - a.t
        other = max(100.0 * ((b.busy_s - a.busy_s) - ours_s) / span, 0.0)
        return {names.HOST_OTHER_CPU_PCT: other, names.HOST_IDLE_CORES: max(CORES - ours_s / span, 0.0)}
