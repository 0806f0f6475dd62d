"""data.format=lmdb: one record per image, in Efficient-PyTorch's layout.

A record's key is `part/index`; its value is the label, 4 bytes little-endian, then the image's bytes. Readers
open the environment read-only, lock-free, without readahead, lazily after the fork, and once per process.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from wif.data.formats.pack import Pack, PackError, Progress, check_record, crc, decode, new_index, record_key
from wif.data.formats.source import PARTS, Listing

DATA = "data.mdb"
_HEADER = struct.Struct("<I")
_OPEN: Dict[str, Tuple[int, object]] = {}  # path -> (pid that opened it, its environment)


def map_size(lengths: List[int], page: int = 4096) -> int:
    """An upper bound on the file LMDB writes for these values: address space only, the file grows as written.

    Each value above half a page takes overflow pages, each record a leaf page; branch and meta pages come on top.
    """
    pages = sum(-(-(n + _HEADER.size + 64) // page) + 1 for n in lengths)
    return (pages + pages // 64 + 16) * page


def write(tmp: Path, listing: Listing, progress: Progress) -> Tuple[dict, List[str]]:
    """Every image of the listing into tmp/data.mdb; returns the index and the data files."""
    import lmdb

    lengths = [os.path.getsize(p) for part in PARTS for p in listing.paths[part]]
    env = lmdb.open(
        str(tmp), map_size=map_size(lengths), subdir=True, sync=False, metasync=False, meminit=False, max_dbs=0
    )
    index, done, written = new_index(), 0, 0
    try:
        for part in PARTS:
            entry = index[part]
            txn = env.begin(write=True)
            for i, (path, label) in enumerate(zip(listing.paths[part], listing.labels[part])):
                data = Path(path).read_bytes()
                txn.put(record_key(part, i).encode(), _HEADER.pack(int(label)) + data)
                entry["labels"].append(int(label))
                entry["lengths"].append(len(data))
                entry["crc32"].append(crc(data))
                done, written = done + 1, written + len(data)
                progress(done, written)
                if done % 1024 == 0:
                    txn.commit()
                    txn = env.begin(write=True)
            txn.commit()
        env.sync(True)
    finally:
        env.close()
    (tmp / "lock.mdb").unlink(missing_ok=True)  # readers take no lock
    return index, [DATA]


def _env(path: str):
    """This process's read-only environment on the pack at `path`, opened on first use here."""
    import lmdb

    pid, env = _OPEN.get(path, (None, None))
    if pid != os.getpid():
        env = lmdb.open(path, subdir=True, readonly=True, lock=False, readahead=False, meminit=False, max_readers=1024)
        _OPEN[path] = (os.getpid(), env)
    return env


def close(path: str) -> None:
    """Close this process's environment on `path` (before a fork, or once verified)."""
    pid, env = _OPEN.pop(path, (None, None))
    if pid == os.getpid():
        env.close()


def close_all() -> None:
    """Close every environment this process holds, so eviction works: posix_fadvise skips mapped pages."""
    for path in list(_OPEN):
        close(path)


def verify(pack: Pack, decode_all: bool = False) -> None:
    """Every record present, at its length and crc32, with its label; as many entries as pack.json says."""
    import lmdb

    try:
        env = _env(str(pack.path))
        entries = env.stat()["entries"]
        if entries != pack.records:
            raise pack.fail(f"{DATA} holds {entries} records, pack.json says {pack.records}")
        with env.begin(buffers=True) as txn:
            for part in PARTS:
                for i in range(len(pack.index[part]["labels"])):
                    value = txn.get(record_key(part, i).encode())
                    if value is None or len(value) < _HEADER.size:
                        check_record(pack, part, i, data=None if value is None else b"", label=None)
                    label = _HEADER.unpack(value[:4])[0]
                    check_record(pack, part, i, data=bytes(value[_HEADER.size :]), label=label, decode_all=decode_all)
    except lmdb.Error as err:
        raise pack.fail(f"{DATA} cannot be read by LMDB ({type(err).__name__}: {err})") from None
    finally:
        close(str(pack.path))


class LmdbImages:
    """Image i of one part of an LMDB pack, decoded as wif.data.folder.read_image decodes a file. Pickles
    without its environment: each process opens its own on first use."""

    def __init__(self, path: str, part: str, size: Optional[int], native: bool, release: bool = False) -> None:
        self.path, self.part, self.size, self.native = path, part, size, native
        self.release = release  # data.page_cache=cold: let go of the map after each batch (after_batch)

    def after_batch(self) -> None:
        """Under data.page_cache=cold, close this process's map once its batch is read; the next batch reopens it.

        A persistent worker's open map kept a tenth of the pack resident through the eviction between epochs.
        """
        if self.release:
            close(self.path)

    def __call__(self, i: int):
        return decode(self.path, record_key(self.part, i), self._record(i), size=self.size)

    def encoded(self, i: int):
        """Image i's bytes as stored, for data.decode=device."""
        import torch

        return torch.frombuffer(bytearray(self._record(i)), dtype=torch.uint8)

    def _record(self, i: int) -> bytes:
        key = record_key(self.part, i)
        with _env(self.path).begin() as txn:
            value = txn.get(key.encode())
        if value is None:
            raise PackError(f"pack {self.path}: record {key} is missing. Delete the pack (the cache rebuilds it).")
        return value[_HEADER.size :]
