"""The checks of data.decode and data.decode_backend (wif.data.decode does the decoding): what decoding on the
device can run with, refused in one line naming the key before any data is built. Kept beside the schema, as
the format and engine checks are, so that checking a config never imports a data pipeline."""

from __future__ import annotations

from wif.config.engine_checks import installed
from wif.config.formats import PER_SAMPLE
from wif.config.schema import Config, Decode, DecodeBackend, EngineName, TransferKind, require


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
