"""Host and device memory of a run's whole process tree, sampled from outside it.

The sampler is a thread of the supervising process, so it takes no GIL time from the run it measures.
It follows the run's process and every DataLoader worker it starts:
- RSS summed over the tree, CPU time, and the worker count at `rss_interval_s` (cheap);
- USS and PSS summed over the tree at `pss_interval_s` (smaps_rollup costs ~8 ms per resident GiB):
  summed RSS counts shared pages once per process and overstates, summed USS leaves them out and
  understates, summed PSS counts each page once;
- /dev/shm in use (worker-to-main tensors travel there), as a rise over its level at start;
- with a GPU: this tree's device memory (NVML, CUDA context included) and the device's utilization.
Peaks and means are taken over windows the run reports (its epochs), never over the start-up.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import psutil

from wif.config import MeasureConfig

log = logging.getLogger(__name__)
MB = 1024 * 1024
SHM = "/dev/shm"


def _shm_used() -> Optional[int]:
    try:
        return shutil.disk_usage(SHM).used
    except OSError:
        return None


class GpuProbe:
    """NVML reads for one device. NVML is not CUDA: using it never initializes a CUDA context here."""

    def __init__(self, uuid: str) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        self.driver = pynvml.nvmlSystemGetDriverVersion()

    def memory(self, pids: set) -> float:
        """Bytes the tree holds on the device; where a container hides host PIDs, the rise over start."""
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        mine = [p.usedGpuMemory for p in procs if p.pid in pids and p.usedGpuMemory is not None]
        if mine:
            return float(sum(mine))
        return float(max(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.baseline, 0))

    def utilization(self) -> float:
        return float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def close(self) -> None:
        self.nvml.nvmlShutdown()


@dataclass
class Sample:
    t: float
    rss: float
    workers: int
    cpu_pct: float
    shm: Optional[float]
    gpu_mem: Optional[float] = None
    gpu_util: Optional[float] = None


@dataclass
class _Series:
    t: List[float] = field(default_factory=list)
    rows: List[object] = field(default_factory=list)

    def add(self, t: float, row: object) -> None:
        self.t.append(t)
        self.rows.append(row)

    def between(self, t0: float, t1: float) -> List:
        return self.rows[bisect.bisect_left(self.t, t0): bisect.bisect_right(self.t, t1)]


class TreeSampler(threading.Thread):
    def __init__(self, pid: int, cfg: MeasureConfig) -> None:
        super().__init__(name="wif-sampler", daemon=True)
        self.root = psutil.Process(pid)
        self.cfg = cfg
        self.fast, self.slow = _Series(), _Series()
        self.gpu: Optional[GpuProbe] = None
        self._halt = threading.Event()
        self._slow_now = threading.Event()
        self._lock = threading.Lock()
        self._cpu_prev: Dict[int, float] = {}
        self._seen: Dict[int, psutil.Process] = {pid: self.root}
        self._t_prev = time.monotonic()
        self._shm0 = _shm_used()
        self.own_cpu_s = 0.0
        self.wall_s = 0.0

    def attach_gpu(self, uuid: str) -> None:
        with self._lock:
            self.gpu = GpuProbe(uuid)

    def _tree(self) -> List[psutil.Process]:
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return []
        with self._lock:
            for p in procs:
                self._seen.setdefault(p.pid, p)
        return procs

    def seen(self) -> List[psutil.Process]:
        """Every process of the tree ever sampled: what to clean up if the run dies without its workers."""
        with self._lock:
            return list(self._seen.values())

    def _sample_fast(self, procs: List[psutil.Process], now: float) -> None:
        rss, cpu_delta, cpu_now = 0, 0.0, {}
        for p in procs:
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    t = p.cpu_times()
            except psutil.Error:
                continue  # a worker that exited between listing and reading
            cpu_now[p.pid] = t.user + t.system
            if p.pid in self._cpu_prev:
                cpu_delta += max(cpu_now[p.pid] - self._cpu_prev[p.pid], 0.0)
        dt = max(now - self._t_prev, 1e-9)
        cpu_pct = 100.0 * cpu_delta / dt / (psutil.cpu_count() or 1)
        self._cpu_prev, self._t_prev = cpu_now, now
        shm = _shm_used()
        row = Sample(now, rss / MB, max(len(procs) - 1, 0), cpu_pct,
                     None if shm is None or self._shm0 is None else max(shm - self._shm0, 0) / MB)
        with self._lock:
            if self.gpu is not None:
                row.gpu_mem = self.gpu.memory({p.pid for p in procs}) / MB
                row.gpu_util = self.gpu.utilization()
        self.fast.add(now, row)

    def _sample_slow(self, procs: List[psutil.Process], now: float) -> None:
        uss = pss = 0
        for p in procs:
            try:
                full = p.memory_full_info()
            except psutil.Error:
                continue
            uss += full.uss
            pss += full.pss
        self.slow.add(now, (uss / MB, pss / MB))

    def run(self) -> None:
        cfg = self.cfg
        start, cpu0 = time.monotonic(), time.thread_time()
        next_tree = next_slow = start
        procs: List[psutil.Process] = []
        while not self._halt.is_set():
            now = time.monotonic()
            if now >= next_tree:
                procs = self._tree()
                next_tree = now + cfg.tree_interval_s
                if not procs:
                    break
            self._sample_fast(procs, now)
            if now >= next_slow or self._slow_now.is_set():
                self._slow_now.clear()
                c0 = time.thread_time()
                self._sample_slow(procs, now)
                cost = time.thread_time() - c0  # grows with resident memory: back off to stay in budget
                next_slow = now + max(cfg.pss_interval_s, 100.0 * cost / cfg.pss_budget_pct)
            self._halt.wait(cfg.rss_interval_s)
        self.own_cpu_s, self.wall_s = time.thread_time() - cpu0, time.monotonic() - start

    def poke(self) -> None:
        """Take a USS/PSS sample on the next tick: every epoch gets one, however short."""
        self._slow_now.set()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()
        if self.gpu is not None:
            self.gpu.close()

    def epoch_means(self, t0: float, t1: float) -> Dict[str, float]:
        rows = self.fast.between(t0, t1)
        out: Dict[str, float] = {}
        if rows:
            out["cpu_util_pct"] = sum(r.cpu_pct for r in rows) / len(rows)
            utils = [r.gpu_util for r in rows if r.gpu_util is not None]
            if utils:
                out["gpu_util_pct"] = sum(utils) / len(utils)
        return out

    def peaks(self, t0: float, t1: float) -> Dict[str, float]:
        """High-water marks over [t0, t1]; a figure with no sample is left out rather than reported as 0."""
        rows, slow = self.fast.between(t0, t1), self.slow.between(t0, t1)
        out: Dict[str, float] = {}
        if rows:
            out["ram_peak_rss_mb"] = max(r.rss for r in rows)
            out["workers_peak"] = float(max(r.workers for r in rows))
            shm = [r.shm for r in rows if r.shm is not None]
            if shm:
                out["shm_peak_mb"] = max(shm)
            gpu = [r.gpu_mem for r in rows if r.gpu_mem is not None]
            if gpu:
                out["vram_peak_device_mb"] = max(gpu)
        if slow:
            out["ram_peak_uss_mb"] = max(u for u, _ in slow)
            out["ram_peak_pss_mb"] = max(p for _, p in slow)
        return out

    def own_cost_pct(self) -> float:
        """The sampler thread's CPU time as a share of one core over its lifetime."""
        return 100.0 * self.own_cpu_s / self.wall_s if self.wall_s else 0.0
