"""Packs in the cache, or a pack made elsewhere (data.path).

A pack in the cache is named by the digest of the source's listing and the packing settings. It is built
once, into a temporary folder renamed when complete: a pack killed half-way is never used, and is rebuilt.
It is checked record by record before a run uses it (check_pack).
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Optional

from wif.config import DataConfig, DataFormat, DataSource
from wif.data.folder import folder_files
from wif.data.folder_check import unreadable
from wif.data.formats import lmdb_format, shards
from wif.data.formats.pack import PACK_VERSION, Pack, PackError, Progress, finish, open_pack, remove_stale, same_size
from wif.data.formats.source import PARTS, Listing, encoded_files
from wif.measure.lifetime import die_with_parent

log = logging.getLogger("wif")
PROGRESS_LOG_S = 10.0
THROTTLE_ENV = "WIF_PACK_THROTTLE_S"  # seconds to wait after each record: lets a test kill a pack half-way


def listing_of(cfg: DataConfig) -> Listing:
    """The files behind data=encoded (written on first use), or data=folder's without the unreadable ones
    under data.skip_bad=true."""
    skip = unreadable(cfg) if cfg.skip_bad and cfg.root else frozenset()
    if cfg.source is DataSource.encoded:
        return encoded_files(cfg)
    files, n_classes = folder_files(cfg, skip)
    return Listing(
        {p: list(files[f"{p}_paths"]) for p in PARTS},
        {p: files[f"{p}_y"] for p in PARTS},
        n_classes,
        str(Path(str(cfg.root)).expanduser()),
    )


def pack_settings(fmt: DataFormat, shard_mb: float) -> dict:
    """What, beside the listing, changes a pack's bytes: its format, version and, for shards, their size."""
    out = {"format": fmt.value, "version": PACK_VERSION}
    if fmt is DataFormat.shards:
        out.update({"shard_mb": float(shard_mb), "order_seed": shards.ORDER_SEED})
    return out


def pack_dir(cfg: DataConfig, listing: Listing) -> Path:
    """The cache's folder for the pack of `listing` in data.format."""
    key = json.dumps({"listing": listing.digest(), **pack_settings(cfg.format, cfg.shard_mb)}, sort_keys=True)
    tag = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(cfg.cache_dir).expanduser() / "packs" / f"{cfg.format.value}-{tag}"


class ProgressLog:
    """A progress report for packing: a line every `every_s` seconds, and one at the end."""

    def __init__(self, total: int, what: str, every_s: float = PROGRESS_LOG_S) -> None:
        self.total, self.what, self.every_s = total, what, every_s
        self.t0 = self.last = time.perf_counter()
        self.throttle = float(os.environ.get(THROTTLE_ENV, "0") or 0)

    def __call__(self, done: int, written: int) -> None:
        """Take the records and bytes written so far; a line when it is time."""
        if self.throttle:
            time.sleep(self.throttle)
        now = time.perf_counter()
        if now - self.last >= self.every_s or done == self.total:
            self.last = now
            rate = done / max(now - self.t0, 1e-9)
            log.info(f"{self.what}: {done}/{self.total} images, {rate:.0f} images/s, {written / 2**20:.1f} MiB written")


def build(
    listing: Listing,
    fmt: DataFormat,
    out: Path,
    shard_mb: float,
    progress: Optional[Progress] = None,
    source: str = "folder",
) -> Pack:
    """Pack `listing` into `out`: a temporary folder first, renamed when complete.

    Args:
        listing: the source's files and labels.
        fmt: the pack's format.
        out: the pack's folder.
        shard_mb: a shard's size in MiB, for data.format=shards.
        progress: takes records and bytes written; by default a line in the log every PROGRESS_LOG_S.
        source: the source's data option, kept in pack.json.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    total = sum(len(p) for p in listing.paths.values())
    progress = progress or ProgressLog(total, f"data.format={fmt.value}: packing {listing.where}")
    if fmt is DataFormat.lmdb:
        index, files = lmdb_format.write(tmp, listing, progress)
    else:
        index, files = shards.write(tmp, listing, shard_mb=shard_mb, progress=progress)
    extra = {
        "num_classes": listing.num_classes,
        "source": source,
        "made_from": listing.where,
        **pack_settings(fmt, shard_mb),
    }
    finish(tmp, out, fmt=fmt.value, index=index, files=files, extra=extra)
    return open_pack(out, fmt.value)


def ensure_pack(cfg: DataConfig, check: bool = True, progress: Optional[Progress] = None) -> Pack:
    """The pack a run reads: data.path, or the cache's pack, built when missing; checked once with `check`."""
    if cfg.path is not None:
        if not (Path(cfg.path).expanduser() / "pack.json").is_file():
            raise PackError(
                f"data.path={cfg.path} is not a wif pack (no pack.json there). Make one with wif-pack, "
                "or leave data.path unset to pack into the cache."
            )
        pack = open_pack(Path(cfg.path).expanduser(), cfg.format.value)
    else:
        listing = listing_of(cfg)
        out = pack_dir(cfg, listing)
        if (out / "pack.json").exists():
            pack = open_pack(out, cfg.format.value)
        else:
            t0 = time.perf_counter()
            pack = build(listing, cfg.format, out, shard_mb=cfg.shard_mb, progress=progress, source=cfg.source.value)
            seconds = time.perf_counter() - t0
            log.info(
                f"data.format={cfg.format.value}: packed {pack.records} images into {out} "
                f"({pack.nbytes / 2**20:.1f} MiB) in {seconds:.1f} s"
            )
    if check:
        check_pack(pack, cfg.cache_dir)
    return pack


# NOTE [ Pack check ]
# The check reads every record against its index (length, crc32, label) and decodes it once as an image. It
# runs in a forked process: the supervising process runs no torch compute, and a pack corrupt enough to crash
# its reader takes only that process down. The verdict is cached under the data cache dir. Its key is the
# pack's index checksum and its files' sizes and mtimes, so a pack changed since is checked again.


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
    """Raise PackError naming the pack and the record or file unless every record checks (NOTE [ Pack check ])."""
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
