"""Host and device memory of a run's whole process tree, sampled from outside it.

The sampler is a thread of the supervising process, so it takes no GIL time from the run. It follows the
run and its workers at three cadences. At `rss_interval_s` it sums RSS, and reads device memory on a GPU.
At `tree_interval_s` it lists the workers and reads CPU time, /dev/shm and GPU utilization. At `pss_interval_s`
it sums USS and PSS, within `pss_budget_pct` of a core, and at once when an epoch ends or workers start.
Summed PSS counts each shared page once. /dev/shm counts as its rise since the start.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Dict, List, Optional, Tuple

import psutil

from wif.config import MeasureConfig
from wif.measure import names
from wif.measure.epochs import Samples
from wif.measure.nvml import GpuProbe
from wif.measure.proctree import fork_shared_share, shm_used, tree_processes
from wif.measure.sysinfo import usable_cores

log = logging.getLogger(__name__)
MB = 1024 * 1024


class TreeSampler(threading.Thread):
    """The thread that samples one run's process tree; see the module's docstring.

    Args:
        pid: the run's process.
        cfg: the cadences and the PSS budget.
        gpu_baselines: each device's used memory before the run started (wif.measure.nvml).
        forked_from: the process the run was forked from, where not this one; its shared pages count in full.
        unread_reads: PSS reads past the budget a run may make until one holds with workers. The watch's
            windows may follow each other with no read at their ends.
    """

    def __init__(
        self,
        pid: int,
        cfg: MeasureConfig,
        gpu_baselines: Optional[Dict[str, int]] = None,
        forked_from: Optional[int] = None,
        unread_reads: int = 0,
    ) -> None:
        super().__init__(name="wif-sampler", daemon=True)
        self.unread_reads = unread_reads
        self.gpu_baselines = gpu_baselines or {}
        self.gpu_note: Optional[str] = None  # why the run's GPU has no NVML figures
        self.root = psutil.Process(pid)
        me = psutil.Process()
        self.forked_from: Optional[psutil.Process] = (
            psutil.Process(forked_from) if forked_from is not None else me if self.root.ppid() == me.pid else None
        )
        self.cfg = cfg
        self.samples = Samples()  # what it took, cut into the run's windows by its callers
        self.gpu: Optional[GpuProbe] = None
        # trainer.nproc>1: each rank's process and its GPU, as the ranks report them (_sample_ranks)
        self.ranks: Dict[int, Tuple[int, Optional[GpuProbe]]] = {}
        self._parent: Dict[int, int] = {}
        self._halt = threading.Event()
        self._wake = threading.Event()  # set by stop() and poke(): the next sample is taken at once
        self._poked, self._poke_slow = False, True
        self._poke_done = threading.Event()
        self._lock = threading.Lock()
        self._cpu_prev: Dict[int, float] = {}
        self._seen: Dict[int, psutil.Process] = {pid: self.root}
        self._t_prev = time.monotonic()
        self._shm0 = shm_used()
        self._cores = usable_cores()  # a share of what the run may use: its CPUs, its cgroup's quota
        self.own_cpu_s = 0.0
        self.paused_cpu_s = 0.0  # spent on reads while the run waited between epochs
        self.wall_s = 0.0

    def _probe(self, uuid: str) -> Optional[GpuProbe]:
        """The device's NVML probe, or None (and a note) where NVML does not list it: the run goes on."""
        try:
            return GpuProbe(uuid, self.gpu_baselines)
        except LookupError as err:
            self.gpu_note = str(err)
            return None

    def attach_gpu(self, uuid: str) -> None:
        with self._lock:
            self.gpu = self._probe(uuid)

    def add_rank(self, rank: int, pid: int, uuid: Optional[str]) -> None:
        """A rank of a data-parallel run: its process, and the GPU it computes on (None on a CPU)."""
        with self._lock:
            self.ranks[rank] = (pid, self._probe(uuid) if uuid else None)
            self.samples.ranks = len(self.ranks)

    def gpu_tags(self) -> Dict[str, str]:
        """How the run's device memory was read (wif.measure.nvml), or why it was not."""
        if self.gpu is not None:
            return self.gpu.tags()
        return {names.TAG_VRAM_SOURCE: f"none: {self.gpu_note}"} if self.gpu_note else {}

    def seen(self) -> List[psutil.Process]:
        """Every process of the tree ever sampled: what to clean up if the run dies without its workers."""
        with self._lock:
            return list(self._seen.values())

    def _tree(self) -> List[psutil.Process]:
        """The run's process and its workers; empty once the run itself is gone."""
        try:
            procs = tree_processes(self.root, known=self._seen, parents=self._parent)
        except psutil.Error:
            return []
        with self._lock:
            return [self._seen.setdefault(p.pid, p) for p in procs]

    def _sample_fast(self, procs: List[psutil.Process], now: float) -> None:
        rss = 0
        for p in procs:
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                continue  # a worker that exited since the tree was listed
        with self._lock:
            gpu_mem = self.gpu.memory({p.pid for p in procs}) / MB if self.gpu is not None else None
        self.samples.fast.add(now, rss / MB, gpu_mem)
        if self.ranks:
            self._sample_ranks(procs, now)

    def _sample_ranks(self, procs: List[psutil.Process], now: float) -> None:
        """Per rank: its workers, its process's descendants, and its device memory on its own GPU."""
        with self._lock:
            ranks = sorted(self.ranks.items())
        slot = {pid: i for i, (_, (pid, _)) in enumerate(ranks)}  # a rank's process -> its place in the row
        under: List[set] = [{pid} for _, (pid, _) in ranks]
        for p in procs:
            pid, hops = p.pid, 0
            while pid in self._parent and hops < 64:  # up to the rank that started it, if any
                pid, hops = self._parent[pid], hops + 1
                if pid in slot:
                    under[slot[pid]].add(p.pid)
                    break
        workers = [len(pids) - 1 for pids in under]
        vram = [probe.memory(pids) / MB if probe is not None else None for (_, (_, probe)), pids in zip(ranks, under)]
        self.samples.per_rank.add(now, *workers, *vram)

    def _sample_mid(self, procs: List[psutil.Process], now: float) -> None:
        cpu_delta, cpu_now = 0.0, {}
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            cpu_now[p.pid] = t.user + t.system
            cpu_delta += max(cpu_now[p.pid] - self._cpu_prev.get(p.pid, cpu_now[p.pid]), 0.0)
        cpu_pct = 100.0 * cpu_delta / max(now - self._t_prev, 1e-9) / self._cores
        self._cpu_prev, self._t_prev = cpu_now, now
        shm = shm_used()
        shm_mb = None if shm is None or self._shm0 is None else max(shm - self._shm0, 0) / MB
        with self._lock:
            gpu_util = self.gpu.utilization() if self.gpu is not None else None
        workers = max(len(procs) - 1, 0)
        if self.ranks:  # the ranks' workers only: the ranks and the launcher's helpers are not workers
            last = self.samples.per_rank.rows[-1] if self.samples.per_rank.rows else ()
            workers = int(sum(last[: len(self.ranks)])) if last else 0
        self.samples.mid.add(now, workers, cpu_pct, shm_mb, gpu_util)

    def _sample_slow(self, now: float) -> Optional[set]:
        """Sum USS and PSS over the tree, kept only if the tree held still; the PIDs read, or None if dropped.

        A worker forked or gone between reads splits or merges shares already counted: 175 and 562 MB around a true 390.
        """
        procs = self._tree()
        uss = pss = 0
        for p in procs:
            try:
                full = p.memory_full_info()
            except psutil.Error:
                return None  # a worker exited while the tree was being read
            uss += full.uss
            pss += full.pss
        if self.forked_from is not None:
            pss += fork_shared_share(self.forked_from)
        pids = {p.pid for p in procs}
        if not uss or {p.pid for p in self._tree()} != pids:
            return None
        self.samples.slow.add(now, uss / MB, pss / MB)
        return pids

    def run(self) -> None:
        cfg = self.cfg
        start, cpu0 = time.monotonic(), time.thread_time()
        next_tree, next_slow = start, start + cfg.pss_interval_s  # the tree at its start is not measured
        procs: List[psutil.Process] = []
        in_slow: set = set()  # the PIDs the last PSS read covered
        slow_spent = 0.0  # CPU seconds of all PSS reads so far
        past_budget = 0  # PSS reads made beyond the budget before one held with workers
        workers_read = False  # a PSS read held with workers in the tree
        while not self._halt.is_set():
            now = time.monotonic()
            poked, self._poked = self._poked, False
            if now >= next_tree or poked:
                procs = self._tree()
                if not procs:
                    break
                self._sample_mid(procs, now)
                next_tree = now + cfg.tree_interval_s
                if {p.pid for p in procs} - in_slow:
                    # new workers, each epoch's unless persistent: read at the next tick, else a short epoch's never are
                    next_slow = min(next_slow, now + cfg.rss_interval_s)
            self._sample_fast(procs, now)
            if poked and self._poke_slow:
                # the run waits for its ack: a still tree, and a read outside the budget that costs it nothing
                c0 = time.thread_time()
                read = self._sample_slow(now)
                if read is not None:  # fresh: no periodic read is due again before the interval
                    in_slow, next_slow = read, now + cfg.pss_interval_s
                self.paused_cpu_s += time.thread_time() - c0
            if poked:
                self._poke_done.set()
            # a PSS read costs tens of ms: it waits until the run so far has paid for it within the budget. Until
            # one read held with workers, `unread_reads` go past it: a read as they start spent a minute's budget.
            paid = slow_spent <= cfg.pss_budget_pct / 100.0 * (now - start)
            first = len(procs) > 1 and not workers_read and past_budget < self.unread_reads
            if now >= next_slow and (paid or first):
                past_budget += not paid
                c0 = time.thread_time()
                read = self._sample_slow(now)
                if read is not None:
                    in_slow, next_slow = read, now + cfg.pss_interval_s
                    workers_read = workers_read or len(read) > 1
                else:  # the tree moved during the read: again once it may have settled
                    next_slow = now + cfg.tree_interval_s
                slow_spent += time.thread_time() - c0
            self._wake.wait(cfg.rss_interval_s)
            self._wake.clear()
        self.own_cpu_s, self.wall_s = time.thread_time() - cpu0, time.monotonic() - start
        self._poke_done.set()  # nobody waits on a sampler that has stopped

    def poke(self, timeout_s: float = 30.0, slow: bool = True) -> None:
        """Sample everything now, PSS included where `slow`, and return when it is done.

        Called while the run waits between epochs, so every epoch gets a PSS figure. Without `slow` it reads the tree,
        RSS and CPU alone, in a few ms.
        """
        self._poke_done.clear()
        self._poked, self._poke_slow = True, slow
        self._wake.set()
        if self.is_alive():
            self._poke_done.wait(timeout_s)

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self.is_alive():
            self.join()
        if self.gpu is not None:
            self.gpu.close()
        for _, probe in self.ranks.values():
            if probe is not None:
                probe.close()

    def own_cost_pct(self) -> float:
        """The sampler's CPU time in percent of a core over its life, reads while the run waited left out."""
        return 100.0 * (self.own_cpu_s - self.paused_cpu_s) / self.wall_s if self.wall_s else 0.0
