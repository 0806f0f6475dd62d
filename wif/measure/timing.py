"""Clocks that time an asynchronous device right without adding synchronizations inside the loop.

On CUDA every step records two events on the compute stream, read once after the epoch's sync. Compute is
the sum of event pairs; GPU idle is the gaps between them. On the CPU the host clock is exact. `CopyClock`
splits a blocking copy into its own device time and its wait behind the queued work.
"""

from __future__ import annotations

import contextlib
import time
from typing import ContextManager, Iterator, List, Optional, Tuple

import torch


def synchronize(device: torch.device) -> None:
    """The only device synchronization the loop uses: at the boundaries of what is timed."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def record(device: torch.device) -> "torch.cuda.Event":
    """A timing event queued on `device`'s current stream (not the current device's: time_epochs(device=
    "cuda:1") times the stream its step runs on)."""
    ev = torch.cuda.Event(enable_timing=True)
    ev.record(torch.cuda.current_stream(device))
    return ev


def blocked_s(host_s: float, device_s: float) -> float:
    """The part of the host's `host_s` in a blocking copy that waited for the GPU's queued work, beyond `device_s`."""
    return max(host_s - device_s, 0.0)


class StepClock:
    """Brackets each step's compute; `compute_s` and `gpu_idle_s` are valid after `synchronize`."""

    def __init__(self, device: torch.device) -> None:
        self.cuda, self.device = device.type == "cuda", device
        self._events: List[torch.cuda.Event] = []
        self._host_compute = 0.0
        self._t = 0.0

    def start(self) -> None:
        if self.cuda:
            self._events.append(record(self.device))  # on the compute stream, after this step's copy was queued
        else:
            self._t = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self._events.append(record(self.device))
        else:
            self._host_compute += time.perf_counter() - self._t

    def compute_s(self) -> float:
        return self._spans(0, len(self._events) - 1) if self.cuda else self._host_compute

    def gpu_idle_s(self) -> Optional[float]:
        """None on the CPU: there is no GPU to starve, and a 0 would be a false figure."""
        return self._spans(1, len(self._events) - 2) if self.cuda else None

    def _spans(self, first: int, end: int) -> float:
        """Seconds from event i to event i + 1, summed over every other i from `first` up to `end`."""
        ev = self._events
        return sum(ev[i].elapsed_time(ev[i + 1]) for i in range(first, end, 2)) / 1e3


class CopyClock:
    """The GPU-blocked part of the host's time in blocking copies, for one epoch of `TimedFeed` (CUDA only).

    While `active`, each bracketed copy adds two events on its stream and the host's seconds in it. It never
    synchronizes; `gpu_blocked_s` reads the events after the epoch's one sync.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda, self.device = device.type == "cuda", device
        self._spans: List[Tuple[torch.cuda.Event, torch.cuda.Event, float]] = []

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The window, a transfer call, whose blocking copies count; not evaluation's, nor a side stream's."""
        global _ACTIVE
        before, _ACTIVE = _ACTIVE, self
        try:
            yield
        finally:
            _ACTIVE = before

    def add(self, before: "torch.cuda.Event", after: "torch.cuda.Event", host_s: float) -> None:
        self._spans.append((before, after, host_s))

    def gpu_blocked_s(self) -> Optional[float]:
        """None on the CPU: nothing is queued there, and a 0 would be a false figure."""
        if not self.cuda:
            return None
        return sum(blocked_s(host, a.elapsed_time(b) / 1e3) for a, b, host in self._spans)


_ACTIVE: Optional[CopyClock] = None  # the epoch's clock during a TimedFeed's transfer call


NOT_TIMED = contextlib.nullcontext()  # reusable: what a copy outside a timed CUDA epoch enters, every step on a CPU


class _TimedCopy:
    """One blocking copy bracketed by events on its stream, added to `clock` when it ends."""

    def __init__(self, clock: CopyClock, device: torch.device) -> None:
        self.clock, self.device = clock, device

    def __enter__(self) -> None:
        self.before, self.t0 = record(self.device), time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        host_s = time.perf_counter() - self.t0
        self.clock.add(self.before, record(self.device), host_s)


def blocking_copy(device: torch.device) -> ContextManager[None]:
    """Brackets a copy that blocks the host into the active `CopyClock`; elsewhere a shared no-op."""
    clock = _ACTIVE
    if clock is None or device.type != "cuda":
        return NOT_TIMED
    return _TimedCopy(clock, device)
