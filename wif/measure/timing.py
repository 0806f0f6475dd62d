"""Clocks that time an asynchronous device right without adding synchronizations inside the loop.

On CUDA every step records two events on the compute stream (cheap, no sync); they are read once, after
the epoch's single synchronization. Compute time is the sum of event pairs; GPU idle time is the sum of
gaps between one step's end and the next step's start, which is when the GPU waits for data. On the CPU
work is synchronous, so the host clock is exact and no GPU figure exists.
"""

from __future__ import annotations

import time
from typing import List, Optional

import torch


def synchronize(device: torch.device) -> None:
    """The only device synchronization the loop uses: at the boundaries of what is timed."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Brackets each step's compute; `compute_s` and `gpu_idle_s` are valid after `synchronize`."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._events: List[torch.cuda.Event] = []
        self._host_compute = 0.0
        self._t = 0.0

    def start(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()  # on the current (compute) stream, after this step's copy was queued
            self._events.append(ev)
        else:
            self._t = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append(ev)
        else:
            self._host_compute += time.perf_counter() - self._t

    def compute_s(self) -> float:
        if not self.cuda:
            return self._host_compute
        ev = self._events
        return sum(ev[i].elapsed_time(ev[i + 1]) for i in range(0, len(ev) - 1, 2)) / 1e3

    def gpu_idle_s(self) -> Optional[float]:
        """None on the CPU: there is no GPU to starve, and a 0 would be a false figure."""
        if not self.cuda:
            return None
        ev = self._events
        return sum(ev[i].elapsed_time(ev[i + 1]) for i in range(1, len(ev) - 2, 2)) / 1e3
