"""Typed schemas for every config group, and the checks a type alone cannot express.

Hydra merges each YAML option onto these dataclasses, so a typo or a wrong type fails at launch with
Hydra's own message. `validate` then checks the combinations (ranges, mutually exclusive loader
settings) once, before any training, and raises `ConfigError` with a message meant for the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING


class ConfigError(ValueError):
    """A setting that cannot run; the message names it and says what to do."""


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class DataSource(str, Enum):
    synthetic = "synthetic"  # preprocessed tensors in RAM, as the study holds its images
    folder = "folder"  # the user's ImageFolder, decoded per sample (or once, with data.preload=true)
    encoded = "encoded"  # the synthetic set stored as JPEG bytes, decoded per sample
    fixed = "fixed"  # one random batch already on the device: the model's compute alone (an upper bound)


class Augment(str, Enum):
    none = "none"  # decode only
    flip = "flip"  # random horizontal flip
    standard = "standard"  # random resized crop back to data.image_size, flip


class StartMethod(str, Enum):
    fork = "fork"
    forkserver = "forkserver"
    spawn = "spawn"


class TransferKind(str, Enum):
    copy = "copy"  # fetch a batch on the host, then copy it to the device
    resident = "resident"  # whole dataset on the device before training; batches are index gathers
    stream = "stream"  # copy the next batch on a side CUDA stream while the current one computes


class TrainerMode(str, Enum):
    train = "train"  # the study: loader, transfer and model
    loader_only = "loader_only"  # the loader and transfer alone, no model: how fast can it feed a device


class EngineName(str, Enum):
    dataloader = "dataloader"  # torch.utils.data.DataLoader (the study's engine)
    spdl = "spdl"  # an SPDL pipeline: per-sample map on threads, batching, collate, prefetch
    nodes_threads = "nodes_threads"  # torchdata.nodes ParallelMapper on threads
    nodes_procs = "nodes_procs"  # torchdata.nodes ParallelMapper on processes


class ModelName(str, Enum):
    googlenet = "googlenet"
    tiny = "tiny"


@dataclass
class DataConfig:
    source: DataSource = DataSource.synthetic
    root: Optional[str] = None  # data=folder: an ImageFolder root with train/ and test/
    fraction: float = 0.1  # share of the training set used (then split train/validation)
    num_train: int = 50_000
    num_test: int = 10_000
    val_split: float = 0.2
    image_size: int = 64
    num_classes: int = 10
    batch_size: int = 64
    seed: int = II("seed")  # subset and split; synthetic images have their own seed below
    synthetic_seed: int = 0  # the generated image set itself: the same for every run
    noise: float = 0.35  # synthetic images: noise std relative to the class pattern
    cache_dir: str = "${oc.env:WIF_CACHE_DIR,'~/.cache/wif'}"
    augment: Augment = Augment.none  # per-sample work for data=encoded and data=folder (training split only)
    jpeg_quality: int = 90  # data=encoded
    preload: bool = False  # data=folder: decode once and hold tensors in RAM, as the study did
    skip_bad: bool = False  # data=folder: leave out files that cannot be read as images (else: stop, naming them)


@dataclass
class LoaderConfig:
    name: str = MISSING
    num_workers: int = 0
    prefetch_factor: Optional[int] = None  # PyTorch: only with num_workers > 0
    pin_memory: bool = False
    background: bool = False  # wrap the loader in prefetch_generator.BackgroundGenerator
    bg_max_prefetch: int = 1  # BackgroundGenerator's queue length (the library's default)
    persistent_workers: bool = False
    in_order: bool = True  # false: PyTorch may deliver batches out of order (torch >= 2.6)
    multiprocessing_context: Optional[StartMethod] = None  # null: PyTorch's default start method
    shuffle: bool = True


@dataclass
class EngineConfig:
    """What turns a loader option into batches; the loader option's knobs keep their meaning under each."""

    name: EngineName = EngineName.dataloader
    prefetch_factor: int = 2  # batches in flight per worker when loader.prefetch_factor is null (DataLoader's default)


@dataclass
class TransferConfig:
    kind: TransferKind = TransferKind.copy
    non_blocking: bool = False


@dataclass
class ModelConfig:
    name: ModelName = ModelName.googlenet
    aux_logits: bool = True  # GoogLeNet v1's two auxiliary classifiers, as the original recipe trains it
    aux_weight: float = 0.3  # their loss weight in the original paper
    init_weights: bool = True  # torchvision's truncated-normal init; set explicitly to avoid its warning
    channels: List[int] = field(default_factory=lambda: [16, 32, 64])  # model=tiny only


@dataclass
class TrainerConfig:
    epochs: int = 100
    warmup_epochs: int = 1  # logged, but left out of the summary means
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    mode: TrainerMode = TrainerMode.train
    max_batches: Optional[int] = None  # stop each training epoch after this many batches (null: the whole split)


@dataclass
class TrackingConfig:
    uri: str = "${oc.env:MLFLOW_TRACKING_URI,'sqlite:///mlflow.db'}"
    experiment: str = "who_is_faster"


@dataclass
class MeasureConfig:
    rss_interval_s: float = 0.1  # RSS and CPU time: cheap (~0.05 ms a process)
    tree_interval_s: float = 0.5  # re-list the worker processes: scanning /proc costs ~2.5 ms
    pss_interval_s: float = 1.0  # USS/PSS read smaps_rollup: ~17 ms for a process with torch imported
    pss_budget_pct: float = 1.0  # PSS reads, summed over the run, never take more than this share of a core
    # Others' CPU use during the measured epochs (percent of one core) above which a run is tagged
    # wif.contended=true and left out of the report's fit by default. An idle machine shows a few percent.
    contended_pct: float = 25.0


@dataclass
class SweepConfig:
    shuffle: bool = True  # run each block's cells in an order seeded by the block (hydra/sweeper=blocks)


@dataclass
class RaceConfig:
    """hydra/sweeper=race: blocks run until each fraction's possibly-fastest set is settled."""

    min_blocks: int = 3  # the first look comes after this many blocks
    max_blocks: int = 10  # and the race stops here whatever it has seen
    margin: float = 0.02  # settings within this share of the fastest count as tied
    confidence: float = 0.95  # over the whole race: each look spends (1 - confidence) / looks
    # On a CPU, options that differ only in pin_memory / non_blocking (no-ops there) run the same code:
    # race one of them for all (false: race each anyway, to see for yourself that they tie).
    merge_identical: bool = True
    id: str = ""  # set by the race sweeper on its jobs (tag wif.race_id); not to be set by hand


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    race: RaceConfig = field(default_factory=RaceConfig)
    repeat: int = 0
    seed: int = II("repeat")
    device: Device = Device.auto
    resume: bool = True  # skip a job whose configuration and repeat already have a FINISHED run
    progress: bool = True


def register_configs() -> None:
    """Make the schema known to Hydra; `conf/config.yaml` names it first in its defaults."""
    ConfigStore.instance().store(name="config_schema", node=Config)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: Config, here: bool = True) -> None:
    """Refuse combinations that cannot run, before any data is built or any run is created. `here=False`
    (a sweep submitted to other machines) leaves out what only the machine that runs the job can tell."""
    d, lo, tr = cfg.data, cfg.loader, cfg.trainer
    _require(0.0 < d.fraction <= 1.0,
             f"data.fraction={d.fraction} is outside (0, 1]: pass a share of the training set, e.g. data.fraction=0.1.")
    _require(0.0 <= d.val_split < 1.0,
             f"data.val_split={d.val_split} is outside [0, 1): it is the share of the subset kept for validation, e.g. 0.2.")
    for key, value in (("data.batch_size", d.batch_size), ("trainer.epochs", tr.epochs),
                       ("data.num_train", d.num_train), ("data.num_test", d.num_test),
                       ("data.image_size", d.image_size)):
        _require(value > 0, f"{key}={value} must be a positive whole number.")
    _require(d.num_classes >= 2, f"data.num_classes={d.num_classes}: a classifier needs at least 2 classes.")
    _require(0 <= tr.warmup_epochs < tr.epochs or tr.epochs == 1,
             f"trainer.warmup_epochs={tr.warmup_epochs} leaves no measured epoch out of trainer.epochs={tr.epochs}: "
             "lower warmup_epochs or raise epochs.")
    _require(lo.num_workers >= 0, f"loader.num_workers={lo.num_workers}: the number of worker processes cannot be negative.")
    _require(lo.bg_max_prefetch > 0, f"loader.bg_max_prefetch={lo.bg_max_prefetch} must be at least 1.")
    _require(not (lo.background and lo.num_workers > 0),
             f"loader={lo.name} combines BackgroundGenerator (loader.background=true) with loader.num_workers="
             f"{lo.num_workers}; the study notes the two deadlock together. Use one of them: "
             "loader.background=false, or loader.num_workers=0.")
    if lo.num_workers == 0:
        _require(lo.in_order, "loader.in_order=false needs worker processes, but loader.num_workers=0. "
                 "Set loader.num_workers>0, or loader.in_order=true.")
        _require(lo.multiprocessing_context is None,
                 f"loader.multiprocessing_context={lo.multiprocessing_context.value if lo.multiprocessing_context else ''} "
                 "starts worker processes, but loader.num_workers=0. Set loader.num_workers>0, or "
                 "loader.multiprocessing_context=null.")
        _require(lo.prefetch_factor is None,
                 f"loader.prefetch_factor={lo.prefetch_factor} needs worker processes, but loader.num_workers=0. "
                 "Set loader.num_workers>0, or loader.prefetch_factor=null.")
        _require(not lo.persistent_workers,
                 "loader.persistent_workers=true needs worker processes, but loader.num_workers=0. "
                 "Set loader.num_workers>0, or loader.persistent_workers=false.")
    else:
        _require(lo.prefetch_factor is None or lo.prefetch_factor > 0,
                 f"loader.prefetch_factor={lo.prefetch_factor} must be at least 1 (or null for PyTorch's default).")
    if cfg.transfer.kind is TransferKind.resident:
        _require(lo.num_workers == 0 and not lo.background and not lo.pin_memory,
                 "transfer=resident holds the whole dataset on the device and uses no DataLoader; it cannot take "
                 f"loader.num_workers={lo.num_workers}, loader.background={lo.background} or "
                 f"loader.pin_memory={lo.pin_memory}. Use loader=gpu_resident, or another transfer option.")
    _require(d.augment is Augment.none or d.source is not DataSource.synthetic,
             f"data.augment={d.augment.value} needs images decoded per sample; data=synthetic holds preprocessed "
             "tensors. Use data=encoded (or data=folder), or data.augment=none.")
    _require(1 <= d.jpeg_quality <= 100, f"data.jpeg_quality={d.jpeg_quality} must be between 1 and 100.")
    _require_supported_by_torch(lo)
    from wif.engines.checks import validate_engine  # the engines' own rules live beside them

    validate_engine(cfg)
    if cfg.transfer.kind is TransferKind.stream:
        _require(lo.name != "gpu_resident",
                 "transfer=stream copies host batches to the device on a side CUDA stream, but loader=gpu_resident "
                 "keeps the whole dataset on the device and has no batches to copy. Use transfer=stream with a "
                 "loader option that streams batches (e.g. loader=pin_nb transfer=stream), or drop transfer=stream.")
    _require(tr.max_batches is None or tr.max_batches > 0,
             f"trainer.max_batches={tr.max_batches} must be at least 1 (or null for whole epochs).")
    if d.source is DataSource.folder:
        _require(bool(d.root), "data=folder needs data.root=PATH: a folder with train/ and test/ class folders.")
        _require(not here or Path(str(d.root)).expanduser().is_dir(),
                 f"data.root={d.root} does not exist. Point data=folder at a folder with train/ and test/, each "
                 "holding one sub-folder of images per class.")
    n_subset = round(d.num_train * d.fraction)
    n_val = round(n_subset * d.val_split)
    _require(n_subset - n_val > 0 and (d.val_split == 0 or n_val > 0),
             f"data.fraction={d.fraction} of data.num_train={d.num_train} is {n_subset} images; with "
             f"data.val_split={d.val_split} that leaves {n_subset - n_val} for training and {n_val} for validation. "
             "Raise data.fraction or data.num_train so that neither split is empty.")


# DataLoader keys that older torch releases lack: (key, the default that needs no support, first release)
_NEWER_LOADER_KEYS = (("in_order", True, "2.6"),)


def _require_supported_by_torch(lo: LoaderConfig) -> None:
    import inspect

    import torch
    from torch.utils.data import DataLoader

    accepted = inspect.signature(DataLoader).parameters
    for key, default, release in _NEWER_LOADER_KEYS:
        _require(key in accepted or getattr(lo, key) == default,
                 f"loader.{key}={getattr(lo, key)} needs torch >= {release}; this is torch {torch.__version__}. "
                 f"Upgrade torch, or leave loader.{key} at its default ({default}).")


def warnings_for(cfg: Config, cuda: bool, cores: Optional[int] = None) -> List[str]:
    """Settings that are legal but have no effect or work against themselves; said once, never fatal.

    `cores` (the usable cores) adds the warning that the workers outnumber them; None leaves it out.
    """
    out = []
    workers = cfg.loader.num_workers
    if cores is not None and workers > cores and cfg.data.source is not DataSource.fixed:
        out.append(f"loader.num_workers={workers} is more than the {cores} cores this run may use: the workers "
                   f"take turns on them, so this run measures contention as well as loading.")
    if cfg.transfer.non_blocking and not cfg.loader.pin_memory and cfg.transfer.kind is TransferKind.copy:
        out.append("transfer.non_blocking=true without loader.pin_memory=true: a copy from pageable memory is "
                   "synchronous, so non_blocking has no effect here.")
    if not cuda and (cfg.loader.pin_memory or cfg.transfer.non_blocking):
        out.append("No CUDA device: pin_memory and non_blocking have no effect on the CPU; this run's figures "
                   "are CPU figures (tagged wif.device=cpu).")
    if not cuda and cfg.transfer.kind is TransferKind.stream:
        out.append("transfer=stream needs CUDA for its side stream: on the CPU it falls back to a plain copy.")
    if cfg.data.source is DataSource.fixed:
        out.append("data=fixed: every batch is one random tensor already on the device, so the loader and transfer "
                   "settings have no effect; the run measures the model's compute alone (the upper bound).")
    return out


def as_plain(cfg: Any) -> dict:
    """A resolved, JSON-friendly dict of a config (enums as their names)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(cfg) if not OmegaConf.is_config(cfg) else cfg,
                                  resolve=True, enum_to_str=True)
