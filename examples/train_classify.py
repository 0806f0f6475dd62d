"""A classification loop as users write it, watched by wif: the one line is `wif.watch(loader)`.

The other examples build their own data and model, and train with this loop (`train`) and flags (`parser`).

    python -m examples.train_classify --epochs 3 --workers 0
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import wif

try:
    from tqdm import tqdm
except ImportError:  # --tqdm needs it; without it, the loop is the same
    tqdm = None


class Squares(Dataset):
    """Class k: a bright square at position k in seeded noise, made on access (a decode's worth of work)."""

    def __init__(self, n: int, size: int = 32, classes: int = 4) -> None:
        self.n, self.size, self.classes = n, size, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = 0.5 * torch.randn(3, self.size, self.size, generator=g)
        k = i % self.classes
        x[:, 4 * k : 4 * k + 8, 4 * k : 4 * k + 8] += 2.0
        return x, k


def parser(doc: str, batch_size: int = 64, n_train: int = 1024) -> argparse.ArgumentParser:
    """The flags every example takes: epochs, workers, batch size, training items."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=0, help="the DataLoader's num_workers")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--n-train", type=int, default=n_train, help="training items")
    p.add_argument("--tqdm", action="store_true", help="a progress bar each epoch: wif.watch(tqdm(loader))")
    p.add_argument("--max-steps", type=int, help="leave each epoch after this many batches (a break)")
    return p


@dataclass(frozen=True)
class LoopOptions:
    """How the loop is written: `bar` wraps the loader in a new tqdm each epoch.

    `max_steps` leaves each epoch after that many batches, as loops with a per-epoch step limit do.
    """

    bar: bool = False
    max_steps: Optional[int] = None


def loop_options(args: argparse.Namespace) -> LoopOptions:
    """How the loop is written (the flags --tqdm and --max-steps), for `train`."""
    return LoopOptions(bar=args.tqdm, max_steps=args.max_steps)


def train(
    model: nn.Module,
    loader: Iterable,
    epochs: int,
    device: torch.device,
    lr: float = 0.05,
    *,
    loop: LoopOptions = LoopOptions(),
) -> None:
    """The loop: SGD on cross-entropy, the loss kept on the device and read once an epoch.

    Args:
        model: the model to train, moved to `device`.
        loader: the batches of (x, y).
        epochs: the epochs to run.
        device: where the model trains.
        lr: SGD's learning rate.
        loop: how the loop is written: a progress bar, a step limit.
    """
    bar, max_steps = loop.bar, loop.max_steps
    if bar and tqdm is None:
        raise SystemExit("--tqdm needs tqdm: pip install tqdm")
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        model.train()
        total, batches = torch.zeros((), device=device), 0
        for x, y in wif.watch(tqdm(loader) if bar else loader):  # the one line: was `for x, y in loader:`
            if max_steps is not None and batches == max_steps:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
            batches += 1
        print(f"epoch {epoch}: mean loss {total.item() / max(batches, 1):.3f}")


def main() -> None:
    args = parser(__doc__).parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(
        Squares(args.n_train),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
    )
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
    )
    train(model, loader, args.epochs, device, loop=loop_options(args))


if __name__ == "__main__":
    main()
