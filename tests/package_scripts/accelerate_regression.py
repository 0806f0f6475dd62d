"""accelerate's test model and data: `accelerate.test_utils.training`'s RegressionModel trained on its
RegressionDataset (generated), through a DataLoader that the Accelerator prepares on the CPU. The loop is
the one of accelerate's own `test_utils/scripts/test_script.py` (training_check), over more epochs.

    python -m tests.package_scripts.accelerate_regression --epochs 40
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.test_utils.training import RegressionDataset, RegressionModel
from torch.utils.data import DataLoader

from tests.package_scripts import SlowReads, options


class SlowRegressionDataset(SlowReads, RegressionDataset):
    """accelerate's RegressionDataset, each item after a wait."""


def main() -> None:
    args = options(__doc__)
    accelerator = Accelerator(cpu=True)
    dataset = SlowRegressionDataset(length=args.n_train, seed=42)
    dataset.read_s = args.read_ms / 1000
    train = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, train = accelerator.prepare(model, optimizer, train)
    for _ in range(args.epochs):
        for batch in train:
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
