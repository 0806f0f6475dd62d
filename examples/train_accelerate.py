"""A script with accelerate as its users write it: its own loop, `Accelerator.prepare`, `accelerator.backward`.

`Accelerator.prepare` takes the model, the optimizer and both loaders, and wraps each DataLoader in its
`DataLoaderShard`. Nothing of wif is in it: `wif-advise -- python -m examples.train_accelerate` finds the
training loader inside accelerate's wrapper (docs/advise.md).

Each item waits `--delay-ms` on a read that takes no CPU (`wif.advisor.examples.SlowReads`, standing in for your
Dataset). With `--delay-ms 0 --width 48` the step is the slow part instead.

    python -m examples.train_accelerate --epochs 3 --delay-ms 4 --workers 0
"""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from torch.nn import functional as F
from torch.utils.data import DataLoader

from wif.advisor.examples import SlowReads  # the Dataset only: nothing of wif watches this script

from .models import small_cnn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=4.0, help="each item's wait")
    p.add_argument("--width", type=int, default=8, help="the network's width: 48 makes the step the slow part")
    args = p.parse_args()
    accelerator = Accelerator()
    train_set = SlowReads(args.n_train, size=32, num_classes=4, delay_ms=args.delay_ms, seed=0)
    val_set = SlowReads(64, size=32, num_classes=4, delay_ms=args.delay_ms, seed=1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = DataLoader(val_set, batch_size=args.batch_size)
    model = small_cnn(num_classes=4, width=args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, train_loader, val_loader = accelerator.prepare(model, optimizer, train_loader, val_loader)
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()
        accelerator.print(f"epoch {epoch + 1}: validation accuracy {correct / len(val_set):.2f}")


if __name__ == "__main__":
    main()
