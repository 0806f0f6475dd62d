"""The host heap of a run that computes on the CPU with no data loaded: kept, not handed back to the OS.

glibc's malloc returns the top of its heap to the OS once more than M_TRIM_THRESHOLD of it is free. It serves
blocks above M_MMAP_THRESHOLD with mmap. Both thresholds start low, at 128 KiB, and rise as large blocks are
freed: see "dynamic mmap threshold" in mallopt(3). A run that loads its data first has raised them before its
first step. The bound's run, `data=fixed`, loads nothing: every step's activations were mapped and unmapped
again. On the smoke preset that made 72,000-107,000 minor page faults an epoch against about 20, and a step
20-60% slower than the loaders' it is the bound of. Raising both thresholds once, as a data load would, removes
that artifact.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_MAX = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the largest mmap threshold it accepts
TRIM = 1 << 30


def keep_heap() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; False where the C library is not glibc."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):  # the C library's own word: confstr(3)
            return False
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_MAX)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM))
    except (OSError, AttributeError, ValueError):  # not glibc, no such library or symbol: the heap stays
        return False
