"""The physical anchor: how fast this machine copies between host and device memory, pinned and pageable.

Every host-to-device copy a run makes is bounded by this rate. So a setting's copy cost can be stated as
bytes over rate (`wif.report.copycost`). It is timed as an asynchronous device should be timed. After one
warm-up copy, two `torch.cuda.Event`s on the copying stream bracket each copy. The device is synchronized
only before and after each size's repeats, and the events are read after that.
Rates are in decimal units (1 GB/s = 10^9 bytes per second); sizes are decimal MB (10^6 bytes).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List

import torch

MB = 10**6
GB = 10**9
DIRECTIONS = ("h2d", "d2h")
MEMORY = ("pinned", "pageable")


@dataclass(frozen=True)
class Rate:
    """One direction, host memory kind and size: the median rate over the repeats."""

    direction: str  # h2d or d2h
    memory: str  # pinned or pageable (the host side)
    size_mb: float
    gbps: float  # median, decimal GB/s


def size_label(size_mb: float) -> str:
    """'256mb', '0.5mb': the suffix of a rate's metric name."""
    return f"{size_mb:g}mb"


def _host(nbytes: int, pinned: bool) -> torch.Tensor:
    t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    t.fill_(1)  # fault every page in now: a first touch inside the timed copy would be counted as copying
    return t


def time_copies(dst: torch.Tensor, src: torch.Tensor, repeats: int, stream: torch.cuda.Stream) -> List[float]:
    """Milliseconds of each of `repeats` copies src -> dst, timed by events on `stream`, after one warm-up copy."""
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)  # warm-up: first-use costs (driver mappings, staging buffers)
        stream.synchronize()  # sync point: the timed copies start from an idle stream
        pairs = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            dst.copy_(src, non_blocking=True)
            end.record(stream)
            pairs.append((start, end))
        stream.synchronize()  # sync point: every timed copy is done; the events can be read
    return [start.elapsed_time(end) for start, end in pairs]


def copy_rates(sizes_mb: Iterable[float], repeats: int, device: torch.device) -> List[Rate]:
    """Host-to-device and device-to-host rates for each size, from pinned and from pageable host memory."""
    stream = torch.cuda.Stream(device)
    out: List[Rate] = []
    for size_mb in sizes_mb:
        nbytes = int(size_mb * MB)
        on_device = torch.empty(nbytes, dtype=torch.uint8, device=device)
        for memory in MEMORY:
            host = _host(nbytes, pinned=memory == "pinned")
            for direction in DIRECTIONS:
                dst, src = (on_device, host) if direction == "h2d" else (host, on_device)
                median_ms = statistics.median(time_copies(dst, src, repeats, stream))
                out.append(Rate(direction, memory, size_mb, nbytes / (median_ms / 1e3) / GB))
            del host
        del on_device
    return out


def rate_metrics(rates: Iterable[Rate]) -> Dict[str, float]:
    """MLflow metrics: `h2d_pinned_gbps_256mb` per size, and `h2d_pinned_best_gbps`, the highest median over
    the sizes (the rate a large copy reaches), per direction and memory kind."""
    metrics: Dict[str, float] = {}
    for r in rates:
        metrics[f"{r.direction}_{r.memory}_gbps_{size_label(r.size_mb)}"] = r.gbps
        best = f"{r.direction}_{r.memory}_best_gbps"
        metrics[best] = max(metrics.get(best, 0.0), r.gbps)
    return metrics
