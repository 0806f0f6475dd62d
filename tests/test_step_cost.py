"""What the harness adds to a training step, counted where load cannot move it: torch ops and Python calls.

The harness's epoch (wif.run.loop.train_epoch over a wif.run.step.Step) and the loop a user writes run over
the same batches. The difference between an epoch of 16 batches and one of 8 is the per-step cost; the
bare loop's is taken off. benchmarks/overhead.py --count gives the same figures for a whole run's config.
"""

from __future__ import annotations

import collections
import sys
from itertools import islice
from typing import Callable, Counter, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from wif.config import TransferConfig
from wif.data.transfer import make_transfer
from wif.run.loop import train_epoch
from wif.run.model import TinyNet
from wif.run.step import Step

CPU = torch.device("cpu")


class Capped:
    """The first `n` batches of a loader, as trainer.max_batches gives them."""

    def __init__(self, loader: DataLoader, n: int) -> None:
        self.loader, self.n = loader, n

    def __iter__(self) -> Iterator:
        return islice(iter(self.loader), self.n)

    def __len__(self) -> int:
        return self.n


def bare_epoch(step: Step, batches: Capped) -> None:
    """The loop a user writes: no clock, no loss kept."""
    for x, y in batches:
        x, y = x.to(CPU), y.to(CPU)
        loss = step.loss_fn(step.model(x), y)
        step.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        step.optimizer.step()


def torch_ops(fn: Callable[[], object]) -> Counter:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return collections.Counter(e.name for e in prof.events())


def python_calls(fn: Callable[[], object]) -> Counter:
    calls: Counter = collections.Counter()

    def tally(frame, event, arg) -> None:  # noqa: ARG001 - sys.setprofile's signature
        if event == "call":
            calls[f"{frame.f_code.co_filename}:{frame.f_code.co_name}"] += 1

    sys.setprofile(tally)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def per_step_extra(count: Callable[[Callable[[], object]], Counter]) -> Counter:
    """What the harness's epoch runs per step beyond the bare loop's: (16 batches - 8 batches), less the bare's."""
    torch.manual_seed(0)
    model = TinyNet(channels=[4, 8], num_classes=10)
    step = Step(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), 0.0, CPU)
    data = TensorDataset(torch.randn(16 * 8, 3, 16, 16), torch.randint(0, 10, (16 * 8,)))
    loader = DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    transfer = make_transfer(TransferConfig(), CPU)
    wif = lambda n: count(lambda: train_epoch(step, Capped(loader, n), transfer))  # noqa: E731
    bare = lambda n: count(lambda: bare_epoch(step, Capped(loader, n)))  # noqa: E731
    wif(2), bare(2)  # warm: first calls build what later ones reuse
    return (wif(16) - wif(8)) - (bare(16) - bare(8))


def test_the_harness_adds_three_torch_ops_a_step_to_keep_the_loss_on_the_device() -> None:
    extra = per_step_extra(torch_ops)
    # detach (2 profiler events) and one add_ into the epoch's sum, per step (8 steps); nothing else
    assert sum(extra.values()) <= 3 * 8, extra
    assert not {
        name for name in extra if name in ("aten::mul", "aten::_to_copy", "aten::item", "aten::_local_scalar_dense")
    }


def test_the_harness_adds_few_python_calls_a_step() -> None:
    extra = per_step_extra(python_calls)
    assert sum(extra.values()) <= 16 * 8, extra.most_common(20)  # 25 a step before the step's cost was cut


def test_the_epochs_loss_is_the_mean_over_its_samples() -> None:
    torch.manual_seed(0)
    model = TinyNet(channels=[4], num_classes=3)
    step = Step(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss(), 0.0, CPU)  # lr 0: fixed
    x, y = torch.randn(10, 3, 8, 8), torch.randint(0, 3, (10,))
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]  # uneven: 4 and 6 samples
    stats = train_epoch(step, batches, make_transfer(TransferConfig(), CPU))
    model.train()
    with torch.no_grad():
        expected = (
            nn.functional.cross_entropy(model(x[:4]), y[:4]) * 4 + nn.functional.cross_entropy(model(x[4:]), y[4:]) * 6
        )
    assert stats.samples == 10
    assert stats.copy_bytes_per_epoch == x.nbytes + y.nbytes
    assert abs(stats.train_loss - expected.item() / 10) < 1e-5
