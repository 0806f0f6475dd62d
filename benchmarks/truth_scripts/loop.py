"""Epochs of a map-style Dataset in a loop of one's own: the panel's plain epochs, one long epoch, workers started
every epoch, and persistent workers are this script at four settings (benchmarks/truth.py).

    python benchmarks/truth_scripts/loop.py --epochs 5 --n-train 320 --num-workers 0
    python benchmarks/truth_scripts/loop.py --epochs 1 --n-train 3000
    python benchmarks/truth_scripts/loop.py --epochs 4 --n-train 1600 --batch-size 16 --num-workers 2
"""

from __future__ import annotations

import torch
from _panel import Items, loader_kwargs, parser, timed, tiny_model, train_epoch
from torch.utils.data import DataLoader


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    loader = DataLoader(
        Items(args.n_train, args.delay_ms), batch_size=args.batch_size, shuffle=True, **loader_kwargs(args)
    )
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with timed() as clock:
        for _ in range(args.epochs):
            clock.epoch()
            train_epoch(model, opt, loader)


if __name__ == "__main__":
    main()
