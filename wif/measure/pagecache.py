"""The page cache without root, for data.page_cache=cold (docs/formats.md).

Files are evicted with `posix_fadvise(POSIX_FADV_DONTNEED)` after an fsync, and their residency read with
`mincore` over an mmap. The bytes a tree read are /proc/<pid>/io read_bytes of the run and its live workers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import tempfile
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

from wif.measure.proctree import descendants
from wif.measure.sysinfo import read_text

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_MAP_FAILED = ctypes.c_void_p(-1).value


def evict(paths: Iterable[str]) -> None:
    """Ask the kernel to drop every file's pages from the page cache (clean ones: hence the fsync first)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                os.fsync(fd)
            except OSError:  # a read-only mount (EROFS, EINVAL): its pages are clean already
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_pages(path: str) -> Tuple[int, int]:
    """(pages of the file in the page cache, pages of the file)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    pages = -(-size // PAGE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap failed on {path}")
        try:
            vec = np.zeros(pages, dtype=np.uint8)
            if _libc.mincore(addr, size, vec.ctypes.data) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return int(np.count_nonzero(vec & 1)), pages


def resident_fraction(paths: Sequence[str]) -> float:
    """The share of the files' pages in the page cache (0.0 for no pages)."""
    resident = total = 0
    for path in paths:
        r, n = resident_pages(path)
        resident, total = resident + r, total + n
    return resident / total if total else 0.0


def eviction_refused(
    paths: Sequence[str], probe: int = 4, limit: float = 0.5, where: Optional[str] = None
) -> Optional[str]:
    """Why data.page_cache=cold cannot work on these files (a tmpfs, advice ignored), or None where it can.

    Only the first few files are read, evicted and checked, so a warm run after the probe finds the rest as they were.
    """
    sample = [p for p in paths[:probe] if os.path.getsize(p) > 0]
    for path in sample:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    evict(sample)
    left = resident_fraction(sample)
    if left <= limit:
        return None
    where = where or os.path.dirname(sample[0])
    return (
        f"data.page_cache=cold: {100 * left:.0f}% of the files probed under {where} stayed in the page cache "
        f"after posix_fadvise(DONTNEED) on its {_filesystem(sample[0])} filesystem, so no epoch would read "
        "storage. Put the data (and WIF_CACHE_DIR for packs) on a disk, or use data.page_cache=warm."
    )


def eviction_refused_in(folder: str) -> Optional[str]:
    """eviction_refused for files yet to be written into `folder` (a pack, data=encoded's files): a probe
    file written there, checked and removed."""
    os.makedirs(folder, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".wif-evict-probe-", dir=folder)
    try:
        os.write(fd, os.urandom(256 << 10))
        os.close(fd)
        return eviction_refused([path], where=folder)
    finally:
        os.unlink(path)


def _filesystem(path: str) -> str:
    """The type of the filesystem holding `path`, from /proc/self/mounts (longest matching mount point)."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                parts = line.split()
                if (
                    len(parts) > 2
                    and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/"))
                    and len(parts[1]) >= len(best)
                ):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def read_bytes(pid: int) -> int:
    """Bytes process `pid` (threads and reaped children included) caused to be read from storage."""
    for line in read_text(f"/proc/{pid}/io").splitlines():  # "": gone, or no CONFIG_TASK_IO_ACCOUNTING
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def tree_read_bytes() -> int:
    """read_bytes over this process and its descendants alive now."""
    return sum(read_bytes(pid) for pid in [os.getpid(), *descendants(os.getpid())])
