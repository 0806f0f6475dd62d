"""What the truth panel's scripts share: items that wait on a read, a tiny model, the DataLoader flags, the clock.

Each script is a user's training as it is written, with nothing of wif in it. It takes its DataLoader settings
and its size on the command line, and prints one line at its end, `truth: train_s=S steady_s=T epochs=N`: the
seconds its training took, from the first epoch's start to the last one's end, and its steady epochs', from the
second epoch's start (the whole where there is one epoch). Evaluation counts; the interpreter's start, the
imports and building the data and the model do not. `benchmarks/truth.py` reads it (NOTE [ Which time is the
truth ] there).
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn
from torch.utils.data import Dataset

MARK = "truth: train_s="


class Items(Dataset):
    """Item i: a seeded 3x16x16 image and its class, after `delay_ms` of waiting (a read that takes no CPU)."""

    def __init__(self, n: int, delay_ms: float, seed: int = 0, classes: int = 4) -> None:
        self.n, self.delay_s, self.seed, self.classes = n, delay_ms / 1000.0, seed, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, int]:
        time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = i % self.classes
        image = 0.5 * torch.randn(3, 16, 16, generator=g)
        image[:, 4 * label : 4 * label + 4, :] += 1.0
        return image, label


def tiny_model(classes: int = 4) -> nn.Module:
    """One convolution, pooling and a linear head: a real backward and optimizer step, small beside the wait."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, classes),
    )


def parser(doc: str, **defaults: Any) -> argparse.ArgumentParser:
    """The flags every panel script takes: its size, and the DataLoader settings wif-advise's pick sets."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--n-train", type=int, default=320, help="training items (a stream's cycle)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--delay-ms", type=float, default=3.0, help="each item's wait")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--prefetch-factor", type=int, default=None, help="with workers; torch's default 2")
    p.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--in-order", action=argparse.BooleanOptionalAction, default=True)
    p.set_defaults(**defaults)
    return p


def loader_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """The DataLoader's keyword arguments from the flags; those that need workers only with workers."""
    kwargs: Dict[str, Any] = {"num_workers": args.num_workers, "pin_memory": args.pin_memory}
    if args.num_workers > 0:
        kwargs.update(persistent_workers=args.persistent_workers, prefetch_factor=args.prefetch_factor)
        if not args.in_order:  # torch >= 2.6
            kwargs["in_order"] = False
    return kwargs


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, batches: Any, max_steps: Optional[int] = None) -> int:
    """One pass of SGD over `batches`, the loss kept on the device and read once; the steps it took."""
    loss_fn, total, steps = nn.CrossEntropyLoss(), torch.zeros(()), 0
    model.train()
    for x, y in batches:
        if steps == max_steps:
            break
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        steps += 1
    print(f"mean loss {total.item() / max(steps, 1):.3f} over {steps} steps", flush=True)
    return steps


class Clock:
    """The training's clock: the script calls `epoch()` as each epoch starts."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.starts: List[float] = []

    def epoch(self) -> None:
        self.starts.append(time.perf_counter())


@contextmanager
def timed() -> Iterator[Clock]:
    """Time the block, the training, and print `truth: train_s=S steady_s=T epochs=N` at its end."""
    clock = Clock()
    yield clock
    end = time.perf_counter()
    steady = end - (clock.starts[1] if len(clock.starts) > 1 else clock.t0)
    print(f"{MARK}{end - clock.t0:.4f} steady_s={steady:.4f} epochs={len(clock.starts)}", flush=True)
