"""The data pipeline's checks: the loader's and transfer's keys, and how the data is stored and decoded.

Each refuses what cannot run together, or with this torch, in one line naming the key, before any data is built
(docs/formats.md, docs/transfers.md). Checking them never imports a data pipeline.
"""

from __future__ import annotations

from typing import Any

from wif.config.engine_checks import installed
from wif.config.schema import (
    Config,
    DataFormat,
    DataSource,
    Decode,
    DecodeBackend,
    EngineName,
    LoaderConfig,
    PageCache,
    TransferKind,
    require,
)
from wif.dataloader_args import ARGS

PER_SAMPLE = (DataSource.folder, DataSource.encoded)  # the sources whose images are decoded per sample


def validate_loader(cfg: Config) -> None:
    """Refuse loader keys that cannot run together, or with the transfer or this torch."""
    lo, transfer = cfg.loader, cfg.transfer.kind
    require(
        lo.num_workers >= 0, f"loader.num_workers={lo.num_workers}: the number of worker processes cannot be negative."
    )
    require(lo.bg_max_prefetch > 0, f"loader.bg_max_prefetch={lo.bg_max_prefetch} must be at least 1.")
    require(
        not (lo.background and lo.num_workers > 0),
        f"loader={lo.name} combines BackgroundGenerator (loader.background=true) with loader.num_workers="
        f"{lo.num_workers}; the study notes the two deadlock together. Use one of them: "
        "loader.background=false, or loader.num_workers=0.",
    )
    _require_table_keys(lo)
    if transfer is TransferKind.resident:
        require(
            lo.num_workers == 0 and not lo.background and not lo.pin_memory,
            "transfer=resident holds the whole dataset on the device and uses no DataLoader; it cannot take "
            f"loader.num_workers={lo.num_workers}, loader.background={lo.background} or "
            f"loader.pin_memory={lo.pin_memory}. Use loader=gpu_resident, or another transfer option.",
        )
        require(
            cfg.data.source is not DataSource.custom,
            "data=custom cannot be held on the device by transfer=resident (loader=gpu_resident): your Dataset "
            "makes its samples on access. Choose a loader option that streams batches.",
        )
    require(
        transfer is not TransferKind.stream or lo.name != "gpu_resident",
        "transfer=stream copies host batches to the device on a side CUDA stream, but loader=gpu_resident "
        "keeps the whole dataset on the device and has no batches to copy. Use transfer=stream with a "
        "loader option that streams batches (e.g. loader=pin_nb transfer=stream), or drop transfer=stream.",
    )


def _require_table_keys(lo: LoaderConfig) -> None:
    """Refuse a loader key of wif.dataloader_args set off its default where it cannot run: at 0 workers, below its
    minimum, on a torch without it."""
    import inspect

    import torch
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    for arg in [arg for arg in ARGS if hasattr(lo, arg.name) and getattr(lo, arg.name) != arg.default]:
        key, value, default = arg.name, getattr(lo, arg.name), arg.default
        require(
            lo.num_workers > 0 or not arg.needs_workers,
            f"loader.{key}={_yaml(value)} needs worker processes, but loader.num_workers=0. "
            f"Set loader.num_workers>0, or loader.{key}={_yaml(default)}.",
        )
        require(
            arg.minimum is None or value >= arg.minimum,
            f"loader.{key}={value} must be at least {arg.minimum} ({arg.unset}).",
        )
        require(
            key in accepted or not arg.keyword,  # one that a worker_init_fn carries: any torch
            f"loader.{key}={value} needs torch >= {'.'.join(map(str, arg.since))}; this is torch {torch.__version__}. "
            f"Upgrade torch, or leave loader.{key} at its default ({default}).",
        )


def _yaml(value: Any) -> str:
    """A value as it is typed on the command line: true, null, spawn."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(getattr(value, "value", value))


def validate_uint8(cfg: Config) -> None:
    """Refuse transfer.uint8=true unless the batches are wif's own images, copied from the host and normalized after."""
    if not cfg.transfer.uint8:
        return
    drop = "Drop transfer.uint8=true"
    require(
        cfg.transfer.kind is not TransferKind.resident,
        f"transfer.uint8=true with loader={cfg.loader.name} (transfer=resident): the dataset is held on the "
        f"device, so nothing travels per batch. {drop}, or use a loader option that streams batches.",
    )
    require(
        cfg.data.source is not DataSource.fixed,
        f"transfer.uint8=true with data=fixed: its batch is made on the device, never copied. {drop}.",
    )
    require(
        cfg.data.source is not DataSource.custom,
        f"transfer.uint8=true with data=custom: your Dataset decides its own dtype and normalization. {drop}, "
        "or return uint8 from your Dataset and normalize in your model.",
    )
    require(
        cfg.engine.name is not EngineName.dali,
        f"transfer.uint8=true with engine=dali: DALI normalizes in its own pipeline. {drop}, or use another engine.",
    )


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
