"""The checks a type alone cannot express: combinations that cannot run, and settings that have no effect.

A combination that cannot run is refused with one line naming the key, before any data is built. A legal
setting that has no effect is warned of once.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from wif.config.decode import validate_decode
from wif.config.engine_checks import validate_engine
from wif.config.formats import validate_format
from wif.config.schema import (
    Augment,
    Config,
    DataSource,
    EngineName,
    LoaderConfig,
    TransferKind,
    require,
)
from wif.config.targets import validate_options
from wif.config.trainer_checks import validate_epochs, validate_ranks
from wif.dataloader_args import ARGS


def validate(cfg: Config, here: bool = True) -> None:
    """Refuse combinations that cannot run, before any data is built or any run is created.

    `here=False`, for a sweep submitted to other machines, leaves out what only the machine that runs the job
    can tell.
    """
    d, lo, tr = cfg.data, cfg.loader, cfg.trainer
    require(
        0.0 < d.fraction <= 1.0,
        f"data.fraction={d.fraction} is outside (0, 1]: pass a share of the training set, e.g. data.fraction=0.1.",
    )
    require(
        0.0 <= d.val_split < 1.0,
        f"data.val_split={d.val_split} is outside [0, 1): it is the share of the subset kept for validation, e.g. 0.2.",
    )
    for key, value in (
        ("data.batch_size", d.batch_size),
        ("data.num_train", d.num_train),
        ("data.num_test", d.num_test),
        ("data.image_size", d.image_size),
        ("data.val_images", 1 if d.val_images is None else d.val_images),
        ("data.test_images", 1 if d.test_images is None else d.test_images),
        ("sweep.eval_images", 1 if cfg.sweep.eval_images is None else cfg.sweep.eval_images),
    ):
        require(value > 0, f"{key}={value} must be a positive whole number.")
    require(d.num_classes >= 2, f"data.num_classes={d.num_classes}: a classifier needs at least 2 classes.")
    validate_epochs(tr)
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
    else:
        require(
            lo.prefetch_factor is None or lo.prefetch_factor > 0,
            f"loader.prefetch_factor={lo.prefetch_factor} must be at least 1 (or null for PyTorch's default).",
        )
    if cfg.transfer.kind is TransferKind.resident:
        require(
            lo.num_workers == 0 and not lo.background and not lo.pin_memory,
            "transfer=resident holds the whole dataset on the device and uses no DataLoader; it cannot take "
            f"loader.num_workers={lo.num_workers}, loader.background={lo.background} or "
            f"loader.pin_memory={lo.pin_memory}. Use loader=gpu_resident, or another transfer option.",
        )
    validate_uint8(cfg)
    validate_options(cfg)
    require(
        not (d.source is DataSource.custom and cfg.transfer.kind is TransferKind.resident),
        "data=custom cannot be held on the device by transfer=resident (loader=gpu_resident): your Dataset "
        "makes its samples on access. Choose a loader option that streams batches.",
    )
    require(
        d.augment is Augment.none or d.source is not DataSource.synthetic,
        f"data.augment={d.augment.value} needs images decoded per sample; data=synthetic holds preprocessed "
        "tensors. Use data=encoded (or data=folder), or data.augment=none.",
    )
    require(1 <= d.jpeg_quality <= 100, f"data.jpeg_quality={d.jpeg_quality} must be between 1 and 100.")
    _require_supported_by_torch(lo)
    validate_engine(cfg)
    validate_format(cfg)
    validate_decode(cfg)
    validate_ranks(cfg)
    if cfg.transfer.kind is TransferKind.stream:
        require(
            lo.name != "gpu_resident",
            "transfer=stream copies host batches to the device on a side CUDA stream, but loader=gpu_resident "
            "keeps the whole dataset on the device and has no batches to copy. Use transfer=stream with a "
            "loader option that streams batches (e.g. loader=pin_nb transfer=stream), or drop transfer=stream.",
        )
    require(
        tr.max_batches is None or tr.max_batches > 0,
        f"trainer.max_batches={tr.max_batches} must be at least 1 (or null for whole epochs).",
    )
    require(
        tr.threads is None or tr.threads >= 1,
        f"trainer.threads={tr.threads} must be at least 1 (or null: torch's default, the cores).",
    )
    if d.source is DataSource.folder and d.path is None:  # data.path: the pack is the data, its root unused
        require(
            bool(d.root),
            "data=folder needs data.root=PATH: a folder with train/ and a held-out split (test/, "
            "val/ or validation/), each with one sub-folder per class.",
        )
        require(
            not here or Path(str(d.root)).expanduser().is_dir(),
            f"data.root={d.root} does not exist. Point data=folder at a folder with train/ and a held-out split "
            "(test/, val/ or validation/), each holding one sub-folder of images per class.",
        )
    m = cfg.measure  # a zero interval would make the sampler spin on a core the run needs
    for key in ("rss_interval_s", "tree_interval_s", "pss_interval_s"):
        require(getattr(m, key) > 0, f"measure.{key}={getattr(m, key)} must be positive (seconds between samples).")
    require(
        0 <= m.pss_budget_pct <= 100,
        f"measure.pss_budget_pct={m.pss_budget_pct} must lie in [0, 100] (percent of one core).",
    )
    require(
        cfg.sweep.budget_min is None or cfg.sweep.budget_min > 0,
        f"sweep.budget_min={cfg.sweep.budget_min} must be a positive number of minutes (or null: no budget).",
    )
    n_subset = round(d.num_train * d.fraction)
    n_val = round(n_subset * d.val_split)
    require(
        n_subset - n_val > 0 and (d.val_split == 0 or n_val > 0),
        f"data.fraction={d.fraction} of data.num_train={d.num_train} is {n_subset} images; with "
        f"data.val_split={d.val_split} that leaves {n_subset - n_val} for training and {n_val} for validation. "
        "Raise data.fraction or data.num_train so that neither split is empty.",
    )


def validate_uint8(cfg: Config) -> None:
    """Refuse transfer.uint8=true where batches are not wif's own images, copied from the host.

    Under it, wif's own images cross from the host as uint8 and wif normalizes them on the device. So every
    batch must be copied, and be images whose dtype and normalization wif decides.
    """
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


def _require_supported_by_torch(lo: LoaderConfig) -> None:
    """Refuse a DataLoader key this torch lacks, unless it is left at its default (wif.dataloader_args)."""
    import inspect

    import torch
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    for arg in [arg for arg in ARGS if hasattr(lo, arg.name)]:
        key, default, release = arg.name, arg.default, ".".join(map(str, arg.since))
        require(
            key in accepted or getattr(lo, key) == default,
            f"loader.{key}={getattr(lo, key)} needs torch >= {release}; this is torch {torch.__version__}. "
            f"Upgrade torch, or leave loader.{key} at its default ({default}).",
        )


def warnings_for(cfg: Config, cuda: bool, cores: Optional[int] = None) -> List[str]:
    """Settings that are legal but have no effect or work against themselves; said once, never fatal.

    `cores`, the usable cores, adds the warnings that the processes outnumber them; None leaves them out.
    """
    return _loading_warnings(cfg, cuda, cores) + _run_warnings(cfg, cores)


def _loading_warnings(cfg: Config, cuda: bool, cores: Optional[int]) -> List[str]:
    """The loader, transfer and decode settings that cannot act here: too many workers, or no CUDA."""
    out = []
    workers = cfg.loader.num_workers
    if cores is not None and workers > cores and cfg.data.source is not DataSource.fixed:
        out.append(
            f"loader.num_workers={workers} is more than the {cores} cores this run may use: the workers "
            f"take turns on them, so this run measures contention as well as loading."
        )
    if cfg.transfer.non_blocking and not cfg.loader.pin_memory and cfg.transfer.kind is TransferKind.copy:
        out.append(
            "transfer.non_blocking=true without loader.pin_memory=true: a copy from pageable memory is "
            "synchronous, so non_blocking has no effect here."
        )
    if not cuda and (cfg.loader.pin_memory or cfg.transfer.non_blocking):
        out.append(
            "No CUDA device: pin_memory and non_blocking have no effect on the CPU; this run's figures "
            "are CPU figures (tagged wif.device=cpu)."
        )
    if cfg.engine.name is EngineName.dali and cfg.loader.pin_memory:
        out.append(
            "engine=dali ignores loader.pin_memory: DALI places its own outputs (in device memory when it "
            "decodes on a GPU)."
        )
    if not cuda and cfg.data.decode.value == "device":
        out.append(
            "data.decode=device without CUDA: each batch is decoded on the CPU in the main process, so this "
            "run's figures mean nothing for the speed of decoding on a GPU (tagged wif.decode_note)."
        )
    if not cuda and cfg.transfer.kind is TransferKind.stream:
        out.append("transfer=stream needs CUDA for its side stream: on the CPU it falls back to a plain copy.")
    return out


def _run_warnings(cfg: Config, cores: Optional[int]) -> List[str]:
    """The settings a run's mode or data make void, and ranks that outnumber the cores."""
    out = []
    tr, workers = cfg.trainer, cfg.loader.num_workers
    if tr.mode.value == "loader_only" and (tr.precision.value != "fp32" or tr.channels_last or tr.compile):
        out.append(
            "trainer.mode=loader_only runs no model: trainer.precision, trainer.channels_last and "
            "trainer.compile have no effect on this run."
        )
    if cfg.data.source is DataSource.custom and (cfg.data.num_train, cfg.data.num_test) != (50_000, 10_000):
        out.append(
            f"data.num_train={cfg.data.num_train} / data.num_test={cfg.data.num_test} (set by a preset?) have "
            "no effect with data=custom: your Dataset's length is the training set; data.fraction cuts it."
        )
    busy = tr.nproc * (workers + 1)
    if cores is not None and tr.nproc > 1 and busy > cores:
        out.append(
            f"trainer.nproc={tr.nproc} x (loader.num_workers={workers} + 1) = {busy} busy processes, more than "
            f"the {cores} usable cores: ranks and workers take turns on them (the usual rule: cores >= "
            "ranks x (workers + 1) plus a few)."
        )
    if cfg.data.source is DataSource.fixed:
        out.append(
            "data=fixed: every batch is one random tensor already on the device, so the loader and transfer "
            "settings have no effect; the run measures the model's compute alone (the upper bound)."
        )
    return out
