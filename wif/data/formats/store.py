"""Packs in the cache, or a pack made elsewhere (data.path).

A pack in the cache is named by the digest of the source's listing and the packing settings. It is built
once, into a temporary folder renamed when complete: a pack killed half-way is never used, and is rebuilt.
It is checked record by record before a run uses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Optional

from wif.config import DataConfig, DataFormat
from wif.data.folder_check import unreadable
from wif.data.formats import lmdb_format, shards
from wif.data.formats.check import check_pack
from wif.data.formats.pack import PACK_VERSION, Pack, PackError, Progress, finish, open_pack, remove_stale
from wif.data.formats.source import Listing, source_listing

log = logging.getLogger("wif")
PROGRESS_LOG_S = 10.0
THROTTLE_ENV = "WIF_PACK_THROTTLE_S"  # seconds to wait after each record: lets a test kill a pack half-way


def listing_of(cfg: DataConfig) -> Listing:
    """The source's files as a run reads them: without the unreadable ones under data.skip_bad=true."""
    return source_listing(cfg, unreadable(cfg) if cfg.skip_bad and cfg.root else frozenset())


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
    """The pack a run reads: data.path, or the cache's pack of the source, built when missing.

    With `check`, every record is checked, once per pack: wif.data.formats.check.
    """
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
