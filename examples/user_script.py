"""Your own training script, asking wif two questions (docs/your-workload.md).

Which loader settings feed this Dataset fastest? How long do my epochs take with them, split into waiting for
data and computing? A worker search is often pasted so into PyTorch's ImageNet example.

    python -m examples.user_script --epochs 3        # installed from a wheel: python -m wif.examples.user_script
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader

import wif

from .datasets import noisy_squares
from .models import small_cnn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-workers", type=int, default=None, help="most workers tried (default: twice the cores)")
    p.add_argument("--batches", type=int, default=8, help="batches timed per trial epoch")
    p.add_argument("--n-train", type=int, default=512)
    p.add_argument("--mlflow-experiment", default=None, help="log the epochs to this MLflow experiment")
    args = p.parse_args()

    sets = noisy_squares(n_train=args.n_train)
    train_set = sets["train"]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    pick = wif.tune_workers(
        train_set,
        batch_size=args.batch_size,
        pin_memory=(False, True),
        max_workers=args.max_workers,
        batches=args.batches,
        epochs=2,
    )
    print(pick)
    print(f"pick: num_workers={pick.num_workers} pin_memory={pick.pin_memory}")

    loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=pick.num_workers,
        pin_memory=pick.pin_memory,
        persistent_workers=pick.num_workers > 0,
    )
    model = small_cnn(num_classes=len(train_set.classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(batch: tuple) -> None:  # your step: no .item() here, it would synchronize every batch
        x, y = (t.to(device, non_blocking=pick.pin_memory) for t in batch)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    times = wif.time_epochs(loader, step, args.epochs, device=device, mlflow_experiment=args.mlflow_experiment)
    for e in times.epochs:
        print(
            f"epoch {int(e['epoch'])}: {e['epoch_time_s']:.3f} s, data wait {e['data_wait_s']:.3f} s, "
            f"compute {e['compute_s']:.3f} s, {int(e['samples'])} samples"
        )
    print(
        f"median epoch {times.median_s:.3f} s (warm-up left out), {times.img_s:.0f} img/s, "
        f"data wait {times.data_wait_share:.0%}"
    )


if __name__ == "__main__":
    main()
