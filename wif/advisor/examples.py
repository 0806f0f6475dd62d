"""A Dataset whose items wait on storage: `data=custom data._target_=wif.advisor.examples.slow_reads`.

Each item sleeps `delay_ms`, a read that takes no CPU, then returns a small image. So at 0 workers the step
waits on the data, and workers overlap the waits even on 2 cores. The defaults give 12 batches of 64 at
data.fraction=0.1, so `wif-advise` on it finishes in a few minutes. With `+data.kwargs.burn=true`, each item
computes for its `delay_ms` instead, as a decode does: workers then compete with the step for the cores.

    wif-advise preset=smoke data=custom data._target_=wif.advisor.examples.slow_reads
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
from torch.utils.data import Dataset


@dataclass(frozen=True)
class Item:
    """Each item: a `size` px image of one of `num_classes` classes after `delay_ms` of waiting (computing: `burn`)."""

    size: int = 32
    num_classes: int = 4
    delay_ms: float = 4.0
    burn: bool = False


class SlowReads(Dataset):
    """Item i: a seeded noise image with a bright square for its class, after `delay_ms` of waiting."""

    def __init__(self, n: int, size: int, num_classes: int, delay_ms: float, seed: int, burn: bool = False) -> None:
        self.n, self.size, self.delay_s, self.seed, self.burn = n, size, delay_ms / 1000.0, seed, burn
        self.classes = [f"class{k}" for k in range(num_classes)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        if self.burn:
            end = time.thread_time() + self.delay_s
            while time.thread_time() < end:
                pass
        else:
            time.sleep(self.delay_s)
        label = i % len(self.classes)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        image = 0.5 * torch.randn(3, self.size, self.size, generator=g)
        side = max(self.size // 4, 1)
        offset = (label * side) % (self.size - side + 1)
        image[:, offset : offset + side, offset : offset + side] += 2.0
        return image, label


def slow_reads(n_train: int = 7680, n_val: int = 64, n_test: int = 64, **item: Any) -> Dict[str, Dataset]:
    """Train, 7,680 items: 768 at data.fraction=0.1; and small val and test sets that wait as long.

    Args:
        n_train: the training set's items.
        n_val: the validation set's items.
        n_test: the test set's items.
        item: `Item`'s fields, as data.kwargs gives them: size, num_classes, delay_ms, burn.
    """
    each = Item(**item)  # an unknown key is a TypeError naming it
    sets = {"train": (n_train, 0), "val": (n_val, 1), "test": (n_test, 2)}
    return {
        split: SlowReads(
            n, size=each.size, num_classes=each.num_classes, delay_ms=each.delay_ms, seed=seed, burn=each.burn
        )
        for split, (n, seed) in sets.items()
    }
