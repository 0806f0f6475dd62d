"""Typed schemas for every config group (one dataclass a group, registered with Hydra's ConfigStore).

Hydra merges each YAML option onto these dataclasses, so a typo or a wrong type fails at launch. Hydra's own
message says why. `wif.config.checks` then refuses the combinations a type cannot express.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, OmegaConf

from wif.config.choices import (  # noqa: F401 - re-exported: the schema's vocabulary
    Augment,
    ConfigError,
    DataFormat,
    DataSource,
    Decode,
    DecodeBackend,
    Device,
    EngineName,
    ModelName,
    PageCache,
    Precision,
    StartMethod,
    TrainerMode,
    TransferKind,
    UserCodeError,
    require,
)


@dataclass
class DataConfig:
    source: DataSource = DataSource.synthetic
    root: Optional[str] = None  # data=folder: an ImageFolder root with train/ and test/, val/ or validation/
    fraction: float = 0.1  # share of the training set used (then split train/validation)
    num_train: int = 50_000
    num_test: int = 10_000
    val_split: float = 0.2
    # At most this many images of the validation split (each epoch) and test set, evenly spaced; null: all.
    # data=custom and data=fixed keep theirs; a budgeted sweep sets null ones to sweep.eval_images.
    val_images: Optional[int] = None
    test_images: Optional[int] = None
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
    _target_: Optional[str] = None  # data=custom: an importable callable returning a map-style Dataset
    kwargs: Dict[str, Any] = field(default_factory=dict)  # data=custom: keyword arguments of that callable
    format: Optional[DataFormat] = None  # data=folder|encoded: folder|lmdb|shards, packed once into the cache
    path: Optional[str] = None  # data.format=lmdb|shards: a pack made elsewhere (wif-pack) to train from
    shard_mb: float = 64.0  # data.format=shards: bytes of images per shard, in MiB
    shuffle_buffer: int = 1000  # data.format=shards: samples in the shuffle buffer (after the shards' shuffle)
    page_cache: PageCache = PageCache.warm  # cold: evict the data's files before each epoch
    decode: Decode = Decode.host  # device: decode, crop and normalize each batch on the device (wif.data.decode)
    decode_backend: DecodeBackend = DecodeBackend.auto  # data.decode=device: the JPEG decoder


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
    # each worker's OpenCV, BLAS and OpenMP threads (torch's are 1 there); null: as the libraries set them
    worker_threads: Optional[int] = None
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
    uint8: bool = False  # true: uint8 images cross to the device, made float there (timm's PrefetchLoader)


@dataclass
class ModelConfig:
    name: ModelName = ModelName.googlenet
    aux_logits: bool = True  # GoogLeNet v1's two auxiliary classifiers, as the original recipe trains it
    aux_weight: float = 0.3  # their loss weight in the original paper
    init_weights: bool = True  # torchvision's truncated-normal init; set explicitly to avoid its warning
    channels: List[int] = field(default_factory=lambda: [16, 32, 64])  # model=tiny only
    arch: Optional[str] = None  # model=torchvision|timm: the model's name, e.g. resnet18
    weights: Optional[str] = None  # model=torchvision: named weights (e.g. DEFAULT); model=timm: pretrained=true
    _target_: Optional[str] = None  # model=custom: an importable callable returning an nn.Module
    kwargs: Dict[str, Any] = field(default_factory=dict)  # its keyword arguments (torchvision/timm/custom)


@dataclass
class OptimizerConfig:
    """trainer.optimizer: any torch.optim class; lr, momentum and weight_decay come from trainer.* where it
    takes them, and `kwargs` adds or overrides keyword arguments."""

    _target_: str = "torch.optim.SGD"
    kwargs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainerConfig:
    # A whole number, or auto: stop once the median epoch time is pinned and memory has stopped growing
    # (wif.run.stopping), between min_epochs and max_epochs.
    epochs: Any = 100
    warmup_epochs: int = 1  # logged, but left out of the summary means
    min_epochs: int = 7  # epochs=auto: 1 warm-up + 6 steady, the fewest with a 95% interval of their median
    max_epochs: int = 100  # epochs=auto: the study's epochs
    # epochs=auto: auto (derived from the report's tie margin and the cell's between-run noise in earlier runs,
    # wif.run.stopping), or a share: stop when the median's interval is within +/- this share of it (0.01: 1%)
    auto_target: Any = "auto"
    auto_confidence: float = 0.95  # epochs=auto: that interval's confidence
    memory_window: int = 3  # epochs=auto: epochs that must add no RAM or VRAM peak above memory_tolerance
    memory_tolerance: float = 0.01  # epochs=auto: a peak counts as new above the old one by more than this share
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    mode: TrainerMode = TrainerMode.train
    max_batches: Optional[int] = None  # stop each training epoch after this many batches (null: the whole split)
    precision: Precision = Precision.fp32  # bf16/fp16: autocast around forward and loss (fp16 adds a GradScaler)
    channels_last: bool = False  # model and 4-D inputs in channels_last memory format
    compile: bool = False  # torch.compile the model; compiled before the first epoch, timed apart (compile_s)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    nproc: int = 1  # ranks of one data-parallel run (DDP, wif.run.ddp): 1 = one process, as ever
    # torch's intra-op threads for the model's CPU work (torch.set_num_threads); null: torch's default (the
    # cores, or OMP_NUM_THREADS). On a CPU fewer leave DataLoader workers a core (docs/advise.md).
    threads: Optional[int] = None
    dist_timeout_s: float = 300.0  # nproc>1: a collective waiting longer than this fails the run (no hang)

    @property
    def auto(self) -> bool:
        return self.epochs == "auto"

    @property
    def epoch_limit(self) -> int:
        """The most epochs this run may train: trainer.epochs, or trainer.max_epochs under epochs=auto."""
        return self.max_epochs if self.auto else int(self.epochs)


@dataclass
class TrackingConfig:
    uri: str = "${oc.env:MLFLOW_TRACKING_URI,'sqlite:///mlflow.db'}"
    experiment: str = "who_is_faster"
    baseline: str = "baseline"  # the setting wif-report measures these runs' speedups against (a study names its own)


@dataclass
class MeasureConfig:
    rss_interval_s: float = 0.1  # RSS and CPU time: cheap (~0.05 ms a process)
    tree_interval_s: float = 0.5  # re-list the worker processes: scanning /proc costs ~2.5 ms
    pss_interval_s: float = 1.0  # USS/PSS read smaps_rollup: ~17 ms for a process with torch imported
    pss_budget_pct: float = 0.25  # periodic PSS reads take at most this share of a core (epoch ends' reads: free)
    rank_indices: bool = False  # trainer.nproc>1: log each rank's sample indices per epoch (artifact rank_indices.json)
    # Others' CPU use during the measured epochs, in percent of each core the run left idle (at least one), above
    # which a run is tagged wif.contended=true and left out of the report's fit. An idle machine shows a few percent.
    contended_pct: float = 25.0


@dataclass
class SweepConfig:
    shuffle: bool = True  # run each block's cells in an order seeded by the block (hydra/sweeper=blocks)
    # Minutes of wall time for the whole command (null: none). Only jobs priced to finish in time start
    # (wif.sweep.budget); the same command with a larger budget resumes.
    budget_min: Optional[float] = None
    probe_only: bool = False  # run the budget's probe of this sweep's settings, and nothing else (wif-plan)
    # Under sweep.budget_min: data.val_images and data.test_images where they are null (null here: the whole
    # splits). The race compares training epochs; its test accuracy is a check, and 1024 images tell it to ~3%.
    eval_images: Optional[int] = 1024
    # Set by the budget on each auto job it starts, not by hand: the wall-clock time (time.time()) the run ends
    # by. It stops there with its warm-up and 2 steady epochs at least (wif.run.stopping.out_of_time).
    deadline: Optional[float] = None


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


def as_plain(cfg: Any) -> dict:
    """A resolved, JSON-friendly dict of a config (enums as their names)."""
    return OmegaConf.to_container(
        OmegaConf.structured(cfg) if not OmegaConf.is_config(cfg) else cfg, resolve=True, enum_to_str=True
    )
