"""The loader's checks: keys that cannot run together, with the transfer, or with this torch."""

from __future__ import annotations

from wif.config.schema import Config, DataSource, LoaderConfig, TransferKind, require


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
    if lo.num_workers == 0:
        _require_no_worker_keys(lo)
    else:
        require(
            lo.prefetch_factor is None or lo.prefetch_factor > 0,
            f"loader.prefetch_factor={lo.prefetch_factor} must be at least 1 (or null for PyTorch's default).",
        )
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
    _require_supported_by_torch(lo)


def _require_no_worker_keys(lo: LoaderConfig) -> None:
    """At loader.num_workers=0, refuse the keys that only worker processes take."""
    require(
        lo.in_order,
        "loader.in_order=false needs worker processes, but loader.num_workers=0. "
        "Set loader.num_workers>0, or loader.in_order=true.",
    )
    require(
        lo.multiprocessing_context is None,
        f"loader.multiprocessing_context={lo.multiprocessing_context.value if lo.multiprocessing_context else ''} "
        "starts worker processes, but loader.num_workers=0. Set loader.num_workers>0, or "
        "loader.multiprocessing_context=null.",
    )
    require(
        lo.prefetch_factor is None,
        f"loader.prefetch_factor={lo.prefetch_factor} needs worker processes, but loader.num_workers=0. "
        "Set loader.num_workers>0, or loader.prefetch_factor=null.",
    )
    require(
        not lo.persistent_workers,
        "loader.persistent_workers=true needs worker processes, but loader.num_workers=0. "
        "Set loader.num_workers>0, or loader.persistent_workers=false.",
    )


# DataLoader keys that older torch releases lack: (key, the default that needs no support, first release)
_NEWER_LOADER_KEYS = (("in_order", True, "2.6"),)


def _require_supported_by_torch(lo: LoaderConfig) -> None:
    """Refuse a DataLoader key this torch lacks, unless it is left at its default."""
    import inspect

    import torch
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    for key, default, release in _NEWER_LOADER_KEYS:
        require(
            key in accepted or getattr(lo, key) == default,
            f"loader.{key}={getattr(lo, key)} needs torch >= {release}; this is torch {torch.__version__}. "
            f"Upgrade torch, or leave loader.{key} at its default ({default}).",
        )
