"""Turn a loader option into something to iterate each epoch.

That is a DataLoader, a BackgroundGenerator over one, or batches gathered from a dataset already resident on
the device. `Reading` says how a split is read: batch size, order, pinning.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Protocol, Sized, Tuple

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, TensorDataset

from wif.config import LoaderConfig
from wif.data.datasets import AnySplit, Split
from wif.dataloader_args import ARGS, worker_init
from wif.measure.lifetime import dataloader_worker_init

# Whether this torch's DataLoader takes `in_order` (torch >= 2.6); the watch and the script's candidates read it.
TAKES_IN_ORDER = "in_order" in inspect.signature(DataLoader.__init__).parameters
Batch = Tuple[torch.Tensor, torch.Tensor]
# A run of several ranks (trainer.nproc>1) gives each loader its shard's sampler: (dataset, shuffle) -> Sampler
SamplerFor = Callable[[Dataset, bool], Sampler]


@dataclass(frozen=True)
class Reading:
    """How one split is read each epoch: its batch size, its order, and where its batches go."""

    batch_size: int
    train: bool  # the training split: shuffled where the loader option shuffles
    seed: int  # the shuffle's seed
    pin: bool = False  # loader.pin_memory, already checked against the device: pinning needs CUDA
    resident: bool = False  # transfer=gpu_resident: the split already lives on the device
    sampler: Optional[SamplerFor] = None  # a rank's shard (trainer.nproc>1)


def silence_worker_count_warning() -> None:
    """Silence PyTorch's warning that workers outnumber the cores: `warnings_for` says it once, or wif means it."""
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)


def dataset_of(split: AnySplit) -> Dataset:
    """The dataset DataLoader indexes: tensors held in RAM, or images decoded per sample."""
    return TensorDataset(split.images, split.labels) if isinstance(split, Split) else split


class Batches(Protocol, Sized):
    """What a run iterates each epoch: batches, and how many there are."""

    def __iter__(self) -> Iterator[Batch]: ...


class BackgroundBatches:
    """prefetch_generator's BackgroundGenerator over a fresh iterator each epoch: a thread fills its queue."""

    def __init__(self, loader: DataLoader, max_prefetch: int) -> None:
        self.loader, self.max_prefetch = loader, max_prefetch

    def __iter__(self) -> Iterator[Batch]:
        from prefetch_generator import BackgroundGenerator

        return iter(BackgroundGenerator(iter(self.loader), max_prefetch=self.max_prefetch))

    def __len__(self) -> int:
        return len(self.loader)


class ResidentBatches:
    """Batches gathered by index from tensors that already live on the device: no host work, no copy."""

    def __init__(self, split: Split, batch_size: int, shuffle: bool, seed: int) -> None:
        self.images, self.labels = split.images, split.labels
        self.batch_size, self.shuffle = batch_size, shuffle
        self.generator = torch.Generator(device=self.images.device).manual_seed(seed)

    def __iter__(self) -> Iterator[Batch]:
        n, device = len(self.labels), self.images.device
        order = (
            torch.randperm(n, device=device, generator=self.generator)
            if self.shuffle
            else torch.arange(n, device=device)
        )
        for idx in order.split(self.batch_size):
            yield self.images[idx], self.labels[idx]

    def __len__(self) -> int:
        return -(-len(self.labels) // self.batch_size)


def build_batches(split: AnySplit, cfg: LoaderConfig, reading: Reading) -> Batches:
    """The one place where a loader option becomes an iterable of batches; newer keys passed only where set."""
    shuffle = cfg.shuffle and reading.train
    seed = reading.seed
    if reading.resident:
        return ResidentBatches(split, batch_size=reading.batch_size, shuffle=shuffle, seed=seed)
    newer = {} if cfg.in_order else {"in_order": False}
    dataset = dataset_of(split)
    shard = reading.sampler(dataset, shuffle) if reading.sampler is not None else None  # it shuffles in its place
    carried = {arg.name: getattr(cfg, arg.name) for arg in ARGS if not arg.keyword}  # by the worker_init_fn
    loader = DataLoader(
        dataset,
        batch_size=reading.batch_size,
        shuffle=shuffle and shard is None and not isinstance(dataset, IterableDataset),  # shards shuffle their own
        sampler=shard,
        num_workers=cfg.num_workers,
        prefetch_factor=cfg.prefetch_factor,
        pin_memory=reading.pin,
        persistent_workers=cfg.persistent_workers,
        multiprocessing_context=cfg.multiprocessing_context.value if cfg.multiprocessing_context else None,
        generator=torch.Generator().manual_seed(seed) if shuffle and shard is None else None,
        # workers die with their run, and take the loader keys that are no DataLoader keyword (dataloader_args)
        worker_init_fn=worker_init(carried, dataloader_worker_init) if cfg.num_workers else None,
        collate_fn=getattr(dataset, "collate", None),  # a dataset's own batches (wif.data.decode's encoded bytes)
        **newer,
    )
    return BackgroundBatches(loader, cfg.bg_max_prefetch) if cfg.background else loader


class FixedBatches:
    """One random batch made once on the device and handed out again and again (data=fixed).

    No host work and no copy: the model's compute alone, the bound a loader can approach (nanoGPT's bench.py).
    An epoch has as many batches, its last as few images, as a real split of `samples` images.
    """

    def __init__(
        self, samples: int, batch_size: int, image_size: int, num_classes: int, device: torch.device, seed: int
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        n = min(samples, batch_size)
        self.images = torch.randn(n, 3, image_size, image_size, generator=g).to(device)
        self.labels = torch.randint(0, num_classes, (n,), generator=g).to(device)
        self.samples, self.batch_size = samples, batch_size

    def __iter__(self) -> Iterator[Batch]:
        full, rest = divmod(self.samples, self.batch_size)
        for _ in range(full):
            yield self.images, self.labels
        if rest:
            yield self.images[:rest], self.labels[:rest]  # a view: no copy

    def __len__(self) -> int:
        return -(-self.samples // self.batch_size)
