"""A run's splits read from the chosen format, the same images in every format: image i of a part is
record i of every pack, and the fraction, validation split and seeds pick indices the same way
(`wif.data.datasets.checked_split`)."""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from wif.config import Augment, ConfigError, DataConfig, DataFormat, DataSource, PageCache
from wif.data.datasets import Datasets, ImageFiles, checked_split, decoded_datasets, make_transform
from wif.data.formats.lmdb_format import LmdbImages, close_all
from wif.data.formats.pack import Pack, open_pack
from wif.data.formats.shards import ShardSplit
from wif.data.formats.source import PARTS
from wif.data.formats.store import ensure_pack, listing_of
from wif.measure.epochs import steady
from wif.measure.pagecache import evict, eviction_refused, eviction_refused_in, resident_fraction, tree_read_bytes


def _decode_size(cfg: DataConfig, source: str) -> Tuple[Optional[int], bool]:
    """(size to resize to on decoding, whether images come at their own size) as the source decodes:
    data=folder at data.image_size, or at its own size under augment=standard; data=encoded is already at
    data.image_size."""
    if source == DataSource.encoded.value:
        return None, False
    size = None if cfg.augment is Augment.standard else cfg.image_size
    return size, size is None


def format_datasets(cfg: DataConfig, uint8: bool = False) -> Datasets:
    """Train, validation and test splits from data.format's storage. `uint8` (transfer.uint8=true): the
    images stay uint8, for the device to convert and normalize."""
    if cfg.format is DataFormat.folder:
        listing = listing_of(cfg)
        size, native = _decode_size(cfg, cfg.source.value)
        decoders = {p: ImageFiles(listing.paths[p], size) for p in PARTS}
        for d in decoders.values():
            d.native = native
        return decoded_datasets(
            decoders, listing.labels["train"], listing.labels["test"], listing.num_classes, cfg, uint8
        )
    pack = ensure_pack(cfg, check=False)
    size, native = _decode_size(cfg, pack.meta.get("source", "folder"))
    labels = {p: np.asarray(pack.index[p]["labels"], dtype=np.int64) for p in PARTS}
    n_classes = int(pack.meta["num_classes"])
    if cfg.format is DataFormat.lmdb:
        cold = cfg.page_cache is PageCache.cold
        decoders = {p: LmdbImages(str(pack.path), p, size, native, release=cold) for p in PARTS}
        return decoded_datasets(decoders, labels["train"], labels["test"], n_classes, cfg, uint8)
    train_idx, val_idx = checked_split(len(labels["train"]), cfg)

    def split(part: str, idx: np.ndarray, train: bool) -> ShardSplit:
        in_shards = sorted({pack.index[part]["shard"][int(i)] for i in idx})
        return ShardSplit(
            str(pack.path),
            part,
            in_shards,
            idx,
            torch.from_numpy(labels[part]),
            make_transform(cfg.augment, cfg.image_size, train, native, uint8),
            size,
            native,
            train,
            cfg.shuffle_buffer,
        )

    return Datasets(
        train=split("train", train_idx, True),
        val=split("train", val_idx, False),
        test=split("test", np.arange(len(labels["test"])), False),
        num_classes=n_classes,
    )


def storage_files(cfg: DataConfig, pack: Optional[Pack] = None) -> List[str]:
    """The files a run of this data reads from storage (none for data held in memory)."""
    if cfg.format in (DataFormat.lmdb, DataFormat.shards):
        return (pack or ensure_pack(cfg, check=False)).files()
    if cfg.source is DataSource.folder or cfg.format is DataFormat.folder:
        return listing_of(cfg).all_paths()
    return []


def prepare_storage(cfg: DataConfig) -> Dict[str, Any]:
    """Before a run: the pack built (once) and checked record by record, data=encoded's files written, and
    data.page_cache=cold refused where eviction does not work. Returns the params a run logs:
    data.pack_records, data.pack_bytes (and data.pack_path for a pack)."""
    pack = ensure_pack(cfg) if cfg.format in (DataFormat.lmdb, DataFormat.shards) else None
    files = storage_files(cfg, pack)
    out: Dict[str, Any] = {}
    if pack is not None:
        out = {"pack_path": str(pack.path), "pack_records": pack.records, "pack_bytes": pack.nbytes}
    elif cfg.format is DataFormat.folder:
        out = {"pack_records": len(files), "pack_bytes": sum(os.path.getsize(f) for f in files)}
    if cfg.page_cache is PageCache.cold:
        why = eviction_refused(files)
        if why:
            raise ConfigError(why)
    return out


def preflight_storage(cfg: DataConfig) -> None:
    """What a sweep can check cheaply before its first job: that a cold page cache can evict where the job's
    files are (or will be written). Packs are built, and data.path's checked, as each job starts."""
    if cfg.page_cache is not PageCache.cold:
        return
    if cfg.path is not None:
        where = Path(cfg.path).expanduser()
        why = eviction_refused(open_pack(where).files()) if (where / "pack.json").is_file() else None
    elif cfg.source is DataSource.folder and cfg.format in (None, DataFormat.folder):
        why = eviction_refused(listing_of(cfg).all_paths())
    else:
        why = eviction_refused_in(str(Path(cfg.cache_dir).expanduser()))
    if why:
        raise ConfigError(why)


COLD_RESIDENT_LIMIT = 0.05  # above this share of the data's pages still resident after eviction, an epoch is not cold


class EpochStorage:
    """Around each training epoch: the data's files evicted first (data.page_cache=cold), the share of them
    still resident, and the bytes the run's process tree read from storage during the epoch. Under cold, an
    epoch that kept more than COLD_RESIDENT_LIMIT of the pages resident, or read nothing from storage, says
    so (`page_cache_cold` 0): a warm figure is never logged as a cold one."""

    def __init__(self, cfg: DataConfig) -> None:
        self.cold = cfg.page_cache is PageCache.cold
        self.files = storage_files(cfg) if cfg.source in (DataSource.folder, DataSource.encoded) else []
        self.start = self.faults = 0
        self.resident: Optional[float] = None

    def before(self) -> None:
        if self.cold:
            close_all()  # this process's LMDB maps would keep their pages resident through the eviction
            evict(self.files)
        self.resident = resident_fraction(self.files) if self.files else None
        self.start = tree_read_bytes()
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def after(self) -> Dict[str, float]:
        # minor page faults of the run's own process: after each fork of a worker, the first write to every
        # page it shares with the worker is a fault and a page copy (copy-on-write), paid inside the epoch
        out = {
            "storage_read_bytes": float(tree_read_bytes() - self.start),
            "minor_faults": float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults),
        }
        if self.resident is not None:
            out["page_cache_resident_frac"] = self.resident
            if self.cold:
                cold = self.resident <= COLD_RESIDENT_LIMIT and out["storage_read_bytes"] > 0
                out["page_cache_cold"] = float(cold)
        return out


def cold_verdict(epochs: Sequence[Dict[str, Any]], warmup: int) -> Optional[Dict[str, str]]:
    """The run's tags under data.page_cache=cold, from its epochs' figures (None for a warm run):
    `wif.page_cache_cold` true only if every measured epoch was cold, and why not where it was not."""
    flagged = [e for e in epochs if "page_cache_cold" in e]
    if not flagged:
        return None
    measured = steady(flagged, warmup)
    warm = [e for e in measured if not e["page_cache_cold"]]
    if not warm:
        return {"wif.page_cache_cold": "true"}
    resident = max(e["page_cache_resident_frac"] for e in warm)
    read = min(e["storage_read_bytes"] for e in warm)
    return {
        "wif.page_cache_cold": "false",
        "wif.page_cache_note": f"{len(warm)} of {len(measured)} measured epochs were not cold: up to "
        f"{100 * resident:.0f}% of the data's pages stayed resident after eviction "
        f"(limit {100 * COLD_RESIDENT_LIMIT:.0f}%: a live map holds them, e.g. a "
        f"persistent worker's LMDB environment), as little as {read:.0f} bytes read "
        "from storage in an epoch",
    }
