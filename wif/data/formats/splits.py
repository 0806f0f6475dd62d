"""A run's splits read from the chosen format, the same images in every format.

Image i of a part is record i of every pack. The fraction, validation split and seeds pick indices the same
way in every format (`wif.data.datasets.split_picks`). Around each epoch, `EpochStorage` keeps the page cache
cold under data.page_cache=cold and measures what the epoch read.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from wif.config import Augment, ConfigError, DataConfig, DataFormat, DataSource, PageCache
from wif.data.datasets import Datasets, decoded_datasets, make_transform, split_picks
from wif.data.folder import ImageFiles
from wif.data.formats.lmdb_format import LmdbImages, close_all
from wif.data.formats.pack import Pack, open_pack
from wif.data.formats.shards import ShardPart, ShardSplit
from wif.data.formats.source import PARTS
from wif.data.formats.store import ensure_pack, listing_of
from wif.measure import names
from wif.measure.epochs import steady
from wif.measure.pagecache import evict, eviction_refused, eviction_refused_in, resident_fraction, tree_read_bytes


def _decode_size(cfg: DataConfig, source: str) -> Tuple[Optional[int], bool]:
    """(size to resize to on decoding, whether images come at their own size), as the source decodes."""
    if source == DataSource.encoded.value:
        return None, False
    size = None if cfg.augment is Augment.standard else cfg.image_size
    return size, size is None


def format_datasets(cfg: DataConfig, uint8: bool = False) -> Datasets:
    """Train, validation and test splits from data.format's storage; uint8 images with `uint8`."""
    if cfg.format is DataFormat.folder:
        return _folder_datasets(cfg, uint8)
    pack = ensure_pack(cfg, check=False)
    size, native = _decode_size(cfg, pack.meta.get("source", "folder"))
    labels = {p: np.asarray(pack.index[p]["labels"], dtype=np.int64) for p in PARTS}
    n_classes = int(pack.meta["num_classes"])
    if cfg.format is DataFormat.lmdb:
        cold = cfg.page_cache is PageCache.cold
        decoders = {p: LmdbImages(str(pack.path), p, size=size, native=native, release=cold) for p in PARTS}
        return decoded_datasets(cfg=cfg, decoders=decoders, labels=labels, num_classes=n_classes, uint8=uint8)
    picks = split_picks(cfg, len(labels["train"]), len(labels["test"]))
    splits = {
        name: ShardSplit(
            ShardPart(
                pack_path=str(pack.path),
                part=pick.part,
                shards=sorted({pack.index[pick.part]["shard"][int(i)] for i in pick.indices}),
                indices=pick.indices,
                labels=torch.from_numpy(labels[pick.part]),
            ),
            transform=make_transform(cfg.augment, cfg.image_size, pick.train, native=native, uint8=uint8),
            size=size,
            native=native,
            shuffle=pick.train,
            buffer=cfg.shuffle_buffer,
        )
        for name, pick in picks.items()
    }
    return Datasets(**splits, num_classes=n_classes)


def _folder_datasets(cfg: DataConfig, uint8: bool) -> Datasets:
    """data.format=folder: the listing's image files, decoded per sample."""
    listing = listing_of(cfg)
    size, native = _decode_size(cfg, cfg.source.value)
    decoders = {p: ImageFiles(listing.paths[p], size) for p in PARTS}
    for d in decoders.values():
        d.native = native
    return decoded_datasets(
        cfg=cfg, decoders=decoders, labels=listing.labels, num_classes=listing.num_classes, uint8=uint8
    )


def storage_files(cfg: DataConfig, pack: Optional[Pack] = None) -> List[str]:
    """The files a run of this data reads from storage (none for data held in memory)."""
    if cfg.format in (DataFormat.lmdb, DataFormat.shards):
        return (pack or ensure_pack(cfg, check=False)).files()
    if cfg.source is DataSource.folder or cfg.format is DataFormat.folder:
        return listing_of(cfg).all_paths()
    return []


def prepare_storage(cfg: DataConfig) -> Dict[str, Any]:
    """Ready the storage before a run: the pack built and checked, or data=encoded's files written; the params.

    data.page_cache=cold is refused where eviction does not work.
    """
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
    """Check before a sweep's first job whether a cold page cache can evict where the job's files are."""
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
    """Around each training epoch: the data's storage, evicted and measured.

    An epoch that kept too many pages resident, or read nothing, says `page_cache_cold` 0: never a warm figure as cold.
    """

    def __init__(self, cfg: DataConfig) -> None:
        self.cold = cfg.page_cache is PageCache.cold
        self.files = storage_files(cfg) if cfg.source in (DataSource.folder, DataSource.encoded) else []
        self.start = self.faults = 0
        self.resident: Optional[float] = None

    def before(self) -> None:
        """Before the epoch: evict under cold, then read the resident share and the counters."""
        if self.cold:
            close_all()  # this process's LMDB maps would keep their pages resident through the eviction
            evict(self.files)
        self.resident = resident_fraction(self.files) if self.files else None
        self.start = tree_read_bytes()
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def after(self) -> Dict[str, float]:
        """The epoch's storage figures: bytes read, minor faults, and the resident share where files are read."""
        # The run's own minor faults: after a worker's fork, the first write to each shared page is copied.
        out = {
            names.STORAGE_READ_BYTES: float(tree_read_bytes() - self.start),
            names.MINOR_FAULTS: float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults),
        }
        if self.resident is not None:
            out[names.PAGE_CACHE_RESIDENT_FRAC] = self.resident
            if self.cold:
                cold = self.resident <= COLD_RESIDENT_LIMIT and out[names.STORAGE_READ_BYTES] > 0
                out[names.PAGE_CACHE_COLD] = float(cold)
        return out


def cold_verdict(epochs: Sequence[Dict[str, Any]], warmup: int) -> Optional[Dict[str, str]]:
    """The run's tags under data.page_cache=cold: `wif.page_cache_cold` true if every epoch was; None for a warm run."""
    flagged = [e for e in epochs if names.PAGE_CACHE_COLD in e]
    if not flagged:
        return None
    measured = steady(flagged, warmup)
    warm = [e for e in measured if not e[names.PAGE_CACHE_COLD]]
    if not warm:
        return {names.TAG_PAGE_CACHE_COLD: "true"}
    resident = max(e[names.PAGE_CACHE_RESIDENT_FRAC] for e in warm)
    read = min(e[names.STORAGE_READ_BYTES] for e in warm)
    return {
        names.TAG_PAGE_CACHE_COLD: "false",
        names.TAG_PAGE_CACHE_NOTE: f"{len(warm)} of {len(measured)} measured epochs were not cold: up to "
        f"{100 * resident:.0f}% of the data's pages stayed resident after eviction "
        f"(limit {100 * COLD_RESIDENT_LIMIT:.0f}%: a live map holds them, e.g. a "
        f"persistent worker's LMDB environment), as little as {read:.0f} bytes read "
        "from storage in an epoch",
    }
