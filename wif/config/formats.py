"""The checks of how the data is stored and decoded: data.format, data.path, data.page_cache and data.decode.

Each refuses what cannot run in one line naming the key, before any data is built (docs/formats.md,
docs/transfers.md). Checking them never imports a data pipeline; wif.data.decode does the decoding.
"""

from __future__ import annotations

from wif.config.engine_checks import installed
from wif.config.schema import (
    Config,
    DataFormat,
    DataSource,
    Decode,
    DecodeBackend,
    EngineName,
    PageCache,
    TransferKind,
    require,
)

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


def validate_decode(cfg: Config) -> None:
    """data.decode=device takes images that are still encoded, through a DataLoader, copied per batch, as float."""
    d = cfg.data
    if d.decode is Decode.host:
        require(
            d.decode_backend is DecodeBackend.auto,
            f"data.decode_backend={d.decode_backend.value} picks the decoder of data.decode=device, but "
            "data.decode=host decodes in the loader. Set data.decode=device, or leave data.decode_backend=auto.",
        )
        return
    drop = "Set data.decode=host"
    require(
        d.source in PER_SAMPLE and not d.preload,
        f"data.decode=device decodes encoded images on the device, but data={d.source.value}"
        f"{' with data.preload=true' if d.preload else ''} holds images already decoded (tensors). "
        f"Use data=encoded or data=folder (without data.preload), or {drop}.",
    )
    require(
        cfg.engine.name is not EngineName.dali,
        f"data.decode=device with engine=dali: DALI decodes in its own pipeline (on the GPU where there is one). "
        f"{drop}, or use engine=dataloader.",
    )
    require(
        cfg.engine.name is EngineName.dataloader,
        f"data.decode=device with engine={cfg.engine.name.value}: batches of encoded bytes are collated by "
        f"DataLoader only. Use engine=dataloader, or {drop}.",
    )
    require(
        cfg.transfer.kind is not TransferKind.resident,
        f"data.decode=device with loader={cfg.loader.name} (transfer=resident): the dataset is decoded once and "
        f"held on the device, so no batch is decoded. {drop}, or use a loader option that streams batches.",
    )
    require(
        not cfg.transfer.uint8,
        "data.decode=device with transfer.uint8=true: encoded bytes cross to the device, not uint8 images, and "
        f"they are decoded, converted and normalized there anyway. Drop transfer.uint8=true, or {drop}.",
    )
    require(
        d.decode_backend is not DecodeBackend.torchcodec or installed("torchcodec"),
        "data.decode_backend=torchcodec needs the torchcodec package, which is not installed: "
        'pip install -e ".[decode]" (or data.decode_backend=auto|torchvision).',
    )
