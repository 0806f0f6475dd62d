"""The vocabulary of the schema: the errors a bad setting raises, and every choice a key takes (one Enum each).

`wif.config.schema` builds the config groups from these and re-exports them.
"""

from __future__ import annotations

from enum import Enum


class ConfigError(ValueError):
    """A setting that cannot run; the message names it and says what to do."""


class UserCodeError(ConfigError):
    """A user's factory failed or built the wrong thing: a bad setting, refused before any run is recorded."""


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `ok`: every check reads as the rule it states."""
    if not ok:
        raise ConfigError(message)


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class DataSource(str, Enum):
    synthetic = "synthetic"  # preprocessed tensors in RAM, as the study holds its images
    folder = "folder"  # the user's ImageFolder, decoded per sample (or once, with data.preload=true)
    encoded = "encoded"  # the synthetic set stored as JPEG bytes, decoded per sample
    fixed = "fixed"  # one random batch already on the device: the model's compute alone (an upper bound)
    custom = "custom"  # the user's own Dataset, from the factory named by data._target_


class DataFormat(str, Enum):
    """How images decoded per sample are stored (docs/formats.md); null: as the source keeps them."""

    folder = "folder"  # one file per image
    lmdb = "lmdb"  # one LMDB record per image (encoded bytes + label)
    shards = "shards"  # tar shards in WebDataset's layout, read in sequence


class PageCache(str, Enum):
    warm = "warm"  # files stay in the page cache between epochs, as the OS leaves them
    cold = "cold"  # the data's files are evicted from the page cache before each epoch


class Decode(str, Enum):
    """data.decode: where images decoded per sample are decoded (wif.config.pipeline_checks says what each refuses)."""

    host = "host"  # in __getitem__, in the loader's workers
    device = "device"  # the workers hand over encoded bytes; the main process decodes each batch on the device


class DecodeBackend(str, Enum):
    auto = "auto"  # torchcodec where it is installed, else torchvision
    torchcodec = "torchcodec"
    torchvision = "torchvision"


class Augment(str, Enum):
    none = "none"  # decode only
    flip = "flip"  # random horizontal flip
    # random resized crop to data.image_size and flip; data=folder evaluates on Resize + CenterCrop (ImageNet example)
    standard = "standard"


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
    dali = "dali"  # an NVIDIA DALI pipeline: decoding on the GPU (nvJPEG) where there is one


class ModelName(str, Enum):
    googlenet = "googlenet"
    tiny = "tiny"
    torchvision = "torchvision"  # any torchvision classification model, by model.arch
    timm = "timm"  # any timm model, by model.arch (the optional extra `timm`)
    custom = "custom"  # the user's own factory, named by model._target_


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"  # autocast to bfloat16
    fp16 = "fp16"  # autocast to float16, with a GradScaler
