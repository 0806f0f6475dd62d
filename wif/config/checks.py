"""The checks a type alone cannot express: combinations that cannot run, and settings that have no effect.

A combination that cannot run is refused with one line naming the key, before any data is built. A legal
setting that has no effect is warned of once.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from wif.config.engine_checks import validate_engine
from wif.config.pipeline_checks import validate_decode, validate_format, validate_loader, validate_uint8
from wif.config.schema import (
    Augment,
    Config,
    DataFormat,
    DataSource,
    EngineName,
    TrainerConfig,
    TransferKind,
    require,
)
from wif.config.targets import validate_options


def validate(cfg: Config, here: bool = True) -> None:
    """Refuse combinations that cannot run, before any data or run is made.

    `here=False` leaves out what only the machine that runs the job can tell.
    """
    validate_data(cfg, here=here)
    validate_epochs(cfg.trainer)
    validate_loader(cfg)
    validate_uint8(cfg)
    validate_options(cfg)
    validate_engine(cfg)
    validate_format(cfg)
    validate_decode(cfg)
    validate_ranks(cfg)
    validate_run(cfg)


def validate_data(cfg: Config, here: bool = True) -> None:
    """Refuse data keys that cannot make a training set: shares, counts, and the folder it names."""
    d = cfg.data
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
    require(
        d.augment is Augment.none or d.source is not DataSource.synthetic,
        f"data.augment={d.augment.value} needs images decoded per sample; data=synthetic holds preprocessed "
        "tensors. Use data=encoded (or data=folder), or data.augment=none.",
    )
    require(1 <= d.jpeg_quality <= 100, f"data.jpeg_quality={d.jpeg_quality} must be between 1 and 100.")
    if d.source is DataSource.folder and d.path is None:  # data.path: the pack is the data, its root unused
        _require_folder(str(d.root) if d.root else "", here=here)
    n_subset = round(d.num_train * d.fraction)
    n_val = round(n_subset * d.val_split)
    require(
        n_subset - n_val > 0 and (d.val_split == 0 or n_val > 0),
        f"data.fraction={d.fraction} of data.num_train={d.num_train} is {n_subset} images; with "
        f"data.val_split={d.val_split} that leaves {n_subset - n_val} for training and {n_val} for validation. "
        "Raise data.fraction or data.num_train so that neither split is empty.",
    )


def _require_folder(root: str, here: bool) -> None:
    """data=folder's root: given, and a folder where the job runs here."""
    require(
        bool(root),
        "data=folder needs data.root=PATH: a folder with train/ and a held-out split (test/, "
        "val/ or validation/), each with one sub-folder per class.",
    )
    require(
        not here or Path(root).expanduser().is_dir(),
        f"data.root={root} does not exist. Point data=folder at a folder with train/ and a held-out split "
        "(test/, val/ or validation/), each holding one sub-folder of images per class.",
    )


def validate_run(cfg: Config) -> None:
    """Refuse the trainer's caps, the sampler's intervals and the sweep's budget where they are out of range."""
    tr, m = cfg.trainer, cfg.measure
    require(
        tr.max_batches is None or tr.max_batches > 0,
        f"trainer.max_batches={tr.max_batches} must be at least 1 (or null for whole epochs).",
    )
    require(
        tr.threads is None or tr.threads >= 1,
        f"trainer.threads={tr.threads} must be at least 1 (or null: torch's default, the cores).",
    )
    for key in ("rss_interval_s", "tree_interval_s", "pss_interval_s"):  # a zero interval spins a core the run needs
        require(getattr(m, key) > 0, f"measure.{key}={getattr(m, key)} must be positive (seconds between samples).")
    require(
        0 <= m.pss_budget_pct <= 100,
        f"measure.pss_budget_pct={m.pss_budget_pct} must lie in [0, 100] (percent of one core).",
    )
    require(
        cfg.sweep.budget_min is None or cfg.sweep.budget_min > 0,
        f"sweep.budget_min={cfg.sweep.budget_min} must be a positive number of minutes (or null: no budget).",
    )


def validate_ranks(cfg: Config) -> None:
    """trainer.nproc>1 (wif.run.ddp): every rank needs a DataLoader it can give a DistributedSampler."""
    tr = cfg.trainer
    require(tr.nproc >= 1, f"trainer.nproc={tr.nproc} must be at least 1 (the ranks of one data-parallel run).")
    require(tr.dist_timeout_s > 0, f"trainer.dist_timeout_s={tr.dist_timeout_s} must be positive (seconds).")
    if tr.nproc == 1:
        return
    shard = (
        "a DataLoader whose sampler gives each rank its shard (engine=dataloader, a loader option that "
        "streams batches, real data)"
    )
    require(
        cfg.engine.name is EngineName.dataloader,
        f"trainer.nproc={tr.nproc} with engine={cfg.engine.name.value}: "
        f"a data-parallel run needs {shard}. Use engine=dataloader, or trainer.nproc=1.",
    )
    require(
        cfg.transfer.kind is not TransferKind.resident and cfg.data.source is not DataSource.fixed,
        f"trainer.nproc={tr.nproc} with transfer={cfg.transfer.kind.value} data={cfg.data.source.value}: a "
        f"data-parallel run needs {shard}. Use another loader option or data source, or trainer.nproc=1.",
    )
    require(
        cfg.data.format is not DataFormat.shards,
        f"trainer.nproc={tr.nproc} with data.format=shards: tar shards are dealt to ranks whole, so ranks could "
        "take unequal numbers of batches and wait on each other. Use data.format=lmdb|folder, or trainer.nproc=1.",
    )


def validate_epochs(tr: TrainerConfig) -> None:
    """trainer.epochs: a positive whole number, or auto with a sound stopping rule (wif.run.stopping)."""
    require(
        tr.auto or (isinstance(tr.epochs, int) and not isinstance(tr.epochs, bool) and tr.epochs > 0),
        f"trainer.epochs={tr.epochs} must be a positive whole number, or auto (stop once the epoch time "
        "is pinned and memory has stopped growing).",
    )
    if not tr.auto:
        require(
            0 <= tr.warmup_epochs < tr.epochs or tr.epochs == 1,
            f"trainer.warmup_epochs={tr.warmup_epochs} leaves no measured epoch out of trainer.epochs="
            f"{tr.epochs}: lower warmup_epochs or raise epochs.",
        )
        return
    require(
        0 <= tr.warmup_epochs < tr.min_epochs <= tr.max_epochs,
        f"trainer.epochs=auto needs 0 <= trainer.warmup_epochs < trainer.min_epochs <= trainer.max_epochs; "
        f"got {tr.warmup_epochs}, {tr.min_epochs}, {tr.max_epochs}.",
    )
    target = tr.auto_target
    require(
        target == "auto" or (isinstance(target, (int, float)) and not isinstance(target, bool) and target > 0),
        f"trainer.auto_target={target} must be auto (derived from the tie margin and earlier runs) or a share "
        "above 0 (e.g. 0.01: +/- 1%).",
    )
    require(0.5 <= tr.auto_confidence < 1, f"trainer.auto_confidence={tr.auto_confidence} must lie in [0.5, 1).")
    require(tr.memory_window >= 1, f"trainer.memory_window={tr.memory_window} must be at least 1 epoch.")
    require(tr.memory_tolerance >= 0, f"trainer.memory_tolerance={tr.memory_tolerance} cannot be negative.")


def warnings_for(cfg: Config, cuda: bool, cores: Optional[int] = None) -> List[str]:
    """Legal settings that do nothing or work against themselves, said once; with `cores`, processes beyond them too."""
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
