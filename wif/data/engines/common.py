"""What every pipeline engine shares with DataLoader.

The order of a split's samples, how a batch is made, and how many batches are in flight. The dataset a
split is read through is `wif.data.loaders.dataset_of`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Sequence

import torch
from torch.utils.data import Dataset, RandomSampler, Sampler, SequentialSampler, default_collate

from wif.config import EngineConfig, LoaderConfig
from wif.data.datasets import AnySplit
from wif.data.loaders import Batch


@dataclass(frozen=True)
class Request:
    """What every engine is asked for (wif.data.engines.build_engine_batches): a split, read as these fields say."""

    split: AnySplit
    loader: LoaderConfig
    engine: EngineConfig
    batch_size: int
    train: bool
    seed: int
    pin: bool


def sample_order(dataset: Dataset, shuffle: bool, seed: int) -> Sampler:
    """DataLoader's own samplers with its seeded generator: the same samples each epoch, reshuffled per epoch."""
    if not shuffle:
        return SequentialSampler(dataset)
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


def in_flight(loader: LoaderConfig, engine: EngineConfig) -> int:
    """Batches prefetched in all: prefetch_factor per worker, as DataLoader counts them."""
    per_worker = loader.prefetch_factor if loader.prefetch_factor is not None else engine.prefetch_factor
    return per_worker * max(loader.num_workers, 1)


def num_batches(dataset: Dataset, batch_size: int) -> int:
    return -(-len(dataset) // batch_size)


class FetchBatch:
    """A worker's job, as in a DataLoader worker: fetch a batch's samples and collate them.

    The first call in a new process seeds its random state apart, as DataLoader seeds each worker.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed, self.pid = dataset, seed, os.getpid()

    def __call__(self, indices: Sequence[int]) -> Batch:
        if os.getpid() != self.pid:
            self.pid = os.getpid()
            torch.manual_seed(self.seed * 100_003 + self.pid)
        return collate([self.dataset[i] for i in indices])


def collate(samples: List) -> Batch:
    images, labels = default_collate(samples)
    return images, labels


def pin(batch: Batch) -> Batch:
    x, y = batch
    return x.pin_memory(), y.pin_memory()
