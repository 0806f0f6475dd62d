"""A loader wrapped the way timm wraps it: `timm.data.loader.PrefetchLoader` around a DataLoader of uint8 images.

The images are normalized on the device, on a side stream where CUDA is. `wif.watch` takes the wrapper as it
is and finds the DataLoader inside (its `.loader`) for its settings. Trained by the classification loop.

    python -m examples.train_timm_prefetch --epochs 3
"""

from __future__ import annotations

import torch
from timm.data.loader import PrefetchLoader
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .train_classify import loop_options, parser, train


class Bytes(Dataset):
    """uint8 images as a JPEG decoder hands them over, labels by the brightest channel."""

    def __init__(self, n: int, size: int = 32) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        image = torch.randint(0, 200, (3, self.size, self.size), dtype=torch.uint8, generator=g)
        image[i % 3] += 50
        return image, i % 3


def main() -> None:
    args = parser(__doc__).parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = DataLoader(
        Bytes(args.n_train),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
    )
    loader = PrefetchLoader(base, device=device)  # the loop is handed the wrapper: wif.watch(loader) sees through it
    model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3))
    train(model, loader, args.epochs, device, lr=0.1, loop=loop_options(args))


if __name__ == "__main__":
    main()
