"""A pack checked before a run uses it: every record against its index (length, crc32, label) and decoded
once as an image, in a process forked for the check (the supervising process runs no torch compute, and a
pack corrupt enough to crash its reader takes only that process down). The verdict is cached under the
data cache dir, keyed on the pack's index checksum and its files' sizes and mtimes: a pack changed since
is checked again."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Optional

from wif.data.formats import lmdb_format, shards
from wif.data.formats.pack import Pack, PackError, same_size
from wif.measure.lifetime import die_with_parent


def _stamp(pack: Pack) -> str:
    files = {
        name: [os.stat(pack.path / name).st_size, os.stat(pack.path / name).st_mtime_ns]
        for name in [*pack.meta["files"], "pack.json", "index.json"]
    }
    key = {"path": str(pack.path.resolve()), "index": pack.meta["index_sha256"], "files": files}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _check(pack: Pack, conn) -> None:
    die_with_parent(os.getppid())
    try:
        (lmdb_format.verify if pack.format == "lmdb" else shards.verify)(pack, decode_all=True)
        same_size(pack)
        conn.send(None)
    except PackError as err:
        conn.send(str(err))


def check_pack(pack: Pack, cache_dir: Optional[str]) -> None:
    """Raise PackError (one line naming the pack and the record or file) unless every record checks."""
    marker = Path(cache_dir).expanduser() / "pack-checked" / _stamp(pack) if cache_dir else None
    if marker is not None and marker.exists():
        return
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_check, args=(pack, send), daemon=True)
    proc.start()
    send.close()
    try:
        message = recv.recv()
    except EOFError:  # the checker died without a word: killed by a signal while reading the pack
        proc.join()
        code = proc.exitcode or 0
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        raise pack.fail(f"reading it crashed the checking process ({how}): the pack is corrupt") from None
    proc.join()
    if message is not None:
        raise PackError(message)
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(pack.path))
