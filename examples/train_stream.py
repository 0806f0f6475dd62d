"""A step-based loop over an endless stream, as LLM pretraining is written: no epochs, `--max-steps` steps.

The IterableDataset never ends. Each item waits 4 ms on a read that takes no CPU. Each DataLoader worker takes
its own share of the items by `torch.utils.data.get_worker_info()`. The watch measures it in windows of
batches (docs/advise.md).

    python -m examples.train_stream --max-steps 600 --workers 0
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import wif
from wif.advisor.examples import SlowReads

from .models import small_cnn


class Stream(IterableDataset):
    """Endless: item i is SlowReads' item i mod `n`; worker k of K yields items k, k + K, k + 2K, ..."""

    def __init__(self, n: int, delay_ms: float) -> None:
        self.items = SlowReads(n, size=32, num_classes=4, delay_ms=delay_ms, seed=0)

    def __iter__(self):
        info = get_worker_info()
        i, step = (info.id, info.num_workers) if info is not None else (0, 1)
        while True:
            yield self.items[i % len(self.items)]
            i += step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-steps", type=int, default=600, help="the steps to train, then the loop leaves")
    p.add_argument("--workers", type=int, default=0, help="the DataLoader's num_workers")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--delay-ms", type=float, default=4.0, help="each item's wait")
    args = p.parse_args()
    loader = DataLoader(Stream(4096, args.delay_ms), batch_size=args.batch_size, num_workers=args.workers)
    model = small_cnn(num_classes=4, width=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    total = torch.zeros(())
    for step, (x, y) in enumerate(wif.watch(loader)):  # the one line: was `enumerate(loader)`
        if step == args.max_steps:
            break
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
    print(f"{args.max_steps} steps: mean loss {total.item() / max(args.max_steps, 1):.3f}")


if __name__ == "__main__":
    main()
