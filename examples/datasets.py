"""A dataset factory as `data=custom data._target_=examples.datasets.noisy_squares` calls it.

It returns map-style Datasets of (image, label): here a dict with `train` and `test`. A `val` set is optional;
without one wif cuts `data.val_split` of the training subset. Its arguments come from
`+data.kwargs.NAME=VALUE`, e.g. `+data.kwargs.size=32`. Each sample is made on access, with a little
per-sample work, as decoding and augmenting a real image would be.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
from torch.utils.data import Dataset


class NoisySquares(Dataset):
    """Class k is a bright square at one of `num_classes` positions, in noise; seeded per index."""

    def __init__(self, n: int, size: int, num_classes: int, seed: int) -> None:
        self.n, self.size, self.seed = n, size, seed
        self.classes = [f"square{k}" for k in range(num_classes)]  # wif reads num_classes from here

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = i % len(self.classes)
        image = 0.5 * torch.randn(3, self.size, self.size, generator=g)
        side = max(self.size // 4, 1)
        row, col = divmod(label, 4)
        y0, x0 = (row * side) % (self.size - side + 1), (col * side) % (self.size - side + 1)
        image[:, y0 : y0 + side, x0 : x0 + side] += 2.0
        return image, label


def noisy_squares(n_train: int = 512, n_test: int = 128, size: int = 32, num_classes: int = 4) -> Dict[str, Dataset]:
    return {
        "train": NoisySquares(n_train, size, num_classes, seed=0),
        "test": NoisySquares(n_test, size, num_classes, seed=1),
    }
