"""A compute-bound loop: the step hardly waits for data, and no loader setting can help.

The batches are in memory already (a TensorDataset), and the step is a real convolutional network's.

    python -m examples.train_compute_bound --epochs 3
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .train_classify import loop_options, parser, train


def main() -> None:
    args = parser(__doc__, batch_size=32, n_train=128).parse_args()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(args.n_train, 3, 32, 32, generator=g), torch.randint(0, 10, (args.n_train,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    layers, c = [], 3
    for width in (32, 64, 64):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
        c = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))
    train(
        model,
        loader,
        args.epochs,
        torch.device("cuda" if torch.cuda.is_available() else "cpu"),
        lr=0.01,
        loop=loop_options(args),
    )


if __name__ == "__main__":
    main()
