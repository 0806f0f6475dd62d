"""A user's own factories for the tests: ones that break their promise, to be refused, and ones that count
their calls or wait (importable as tests.user_factories from the checkout, as a user's own module would be)."""

import time
from typing import Dict

import torch


def a_tensor(num_classes: int = 10) -> torch.Tensor:
    """A model factory that returns a tensor instead of an nn.Module."""
    return torch.zeros(num_classes)


NOT_CALLABLE = 3


class FailsOnRank(torch.nn.Module):
    """A tiny model that raises in its `step`-th training forward on one rank (RANK, as the launcher sets it):
    a rank that crashes mid-run, for the DDP failure test."""

    def __init__(self, rank: int = 1, step: int = 2, num_classes: int = 10) -> None:
        super().__init__()
        self.rank, self.step, self.calls = str(rank), step, 0
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os

        if self.training:
            self.calls += 1
            if os.environ.get("RANK") == self.rank and self.calls == self.step:
                raise RuntimeError(f"rank {self.rank} breaks at training step {self.step}")
        return self.net(x)


def counted_squares(calls: str, n_train: int = 96, n_test: int = 32, size: int = 16):
    """examples.datasets.noisy_squares that appends a line to the file `calls` each time it is called: how many
    times a user's (possibly slow) dataset factory was built."""
    from examples.datasets import noisy_squares

    with open(calls, "a") as f:
        f.write("called\n")
    return noisy_squares(n_train=n_train, n_test=n_test, size=size)


def raising_dataset(n: int = 8):
    """A dataset factory whose own code raises."""
    raise ValueError(f"cannot open the bucket for {n} samples")


def exiting_dataset(n: int = 8):
    """A dataset factory whose process ends under it, as a native library's abort would end it."""
    import os

    os._exit(3)


class Sleepy(torch.utils.data.Dataset):
    """A dataset whose every item waits `delay_s` first: a run that lasts as long on any machine."""

    def __init__(self, dataset: torch.utils.data.Dataset, delay_s: float) -> None:
        self.dataset, self.delay_s, self.classes = dataset, delay_s, dataset.classes

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return self.dataset[i]


def sleepy_squares(delay_ms: float, n_train: int = 64, n_test: int = 16, size: int = 16):
    """examples.datasets.noisy_squares whose items each wait `delay_ms`: an epoch's length set by the clock."""
    from examples.datasets import noisy_squares

    return {name: Sleepy(ds, delay_ms / 1000) for name, ds in noisy_squares(n_train, n_test, size).items()}


PARENT_STATE: Dict[str, str] = {}  # set in the test's process before a child starts: a forked child inherits it


def parent_state_seen() -> Dict[str, list]:
    """A data=custom factory whose one sample's label says whether its process inherited PARENT_STATE."""
    return {"train": [(torch.zeros(2), int(bool(PARENT_STATE)))]}
