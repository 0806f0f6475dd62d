"""The checks of data.format, data.path and data.page_cache (docs/formats.md): what each storage format and
the cold page cache can run with, refused in one line naming the key before any data is built."""

from __future__ import annotations

from wif.config.engine_checks import installed
from wif.config.schema import Config, DataFormat, DataSource, EngineName, PageCache, require

PER_SAMPLE = (DataSource.folder, DataSource.encoded)  # the sources whose images are decoded per sample


def validate_format(cfg: Config) -> None:
    """data.format and data.page_cache against the source and engine. Whether data.path holds a pack is
    checked as the job starts (wif.data.formats.store.ensure_pack), with every record."""
    d = cfg.data
    fmt = d.format.value if d.format is not None else "null"
    if d.format is not None:
        require(
            d.source in PER_SAMPLE and not d.preload,
            f"data.format={fmt} stores images decoded per sample; data={d.source.value}"
            f"{' with data.preload=true' if d.preload else ''} holds none. Use data=folder or data=encoded "
            "(without data.preload), or data.format=null.",
        )
    if d.format is DataFormat.shards:
        require(
            cfg.engine.name is EngineName.dataloader,
            f"data.format=shards streams its shards through a DataLoader; engine={cfg.engine.name.value} reads "
            "by index. Use engine=dataloader, or data.format=lmdb|folder.",
        )
    if d.format is DataFormat.lmdb:
        require(
            installed("lmdb"),
            'data.format=lmdb needs the lmdb package, which is not installed: pip install -e ".[formats]"',
        )
        require(
            cfg.engine.name is not EngineName.dali,
            "data.format=lmdb with engine=dali: DALI takes every image's encoded bytes into memory before the "
            "epoch, from files or data=encoded's bytes, never from a pack. Use data.format=folder, or another "
            "engine.",
        )
    require(d.shard_mb > 0, f"data.shard_mb={d.shard_mb} must be above 0 (MiB of images per shard).")
    require(d.shuffle_buffer >= 1, f"data.shuffle_buffer={d.shuffle_buffer} must be at least 1 sample.")
    if d.path is not None:
        require(
            d.format in (DataFormat.lmdb, DataFormat.shards),
            f"data.path={d.path} names a pack, but data.format={fmt}. Set data.format=lmdb or shards, as the "
            "pack was made (wif-pack --to), or leave data.path unset.",
        )
    if d.page_cache is PageCache.cold:
        require(
            d.source is DataSource.folder or (d.source is DataSource.encoded and d.format is not None),
            f"data.page_cache=cold evicts the data's files from the page cache; data={d.source.value}"
            f"{' without data.format' if d.source is DataSource.encoded else ''} reads no files. Use "
            "data=folder, or data=encoded with data.format=folder|lmdb|shards.",
        )
        require(
            not d.preload,
            "data.page_cache=cold with data.preload=true: the images are read once and held in "
            "RAM, so no epoch reads storage. Set data.preload=false, or data.page_cache=warm.",
        )
