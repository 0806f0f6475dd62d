"""A PyTorch Lightning script as its users write it: a LightningModule, a LightningDataModule, `Trainer.fit`.

The LightningDataModule has a training and a validation loader. Nothing of wif is in it:
`wif-advise -- python -m examples.train_lightning` finds the training loader inside Lightning's loop
(docs/advise.md).

Each item waits `--delay-ms` on a read that takes no CPU (`wif.advisor.examples.SlowReads`, standing in for your
Dataset). With `--delay-ms 0 --width 48` the step is the slow part instead.

    python -m examples.train_lightning --epochs 3 --delay-ms 4 --workers 0
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from wif.advisor.examples import SlowReads  # the Dataset only: nothing of wif watches this script

from .models import small_cnn


class Classifier(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.model = small_cnn(num_classes=4, width=width)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.model(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Images(L.LightningDataModule):
    def __init__(self, n_train: int, delay_ms: float, val_delay_ms: float, batch_size: int, workers: int) -> None:
        super().__init__()
        self.n_train, self.batch_size, self.workers = n_train, batch_size, workers
        self.delay_ms, self.val_delay_ms = delay_ms, val_delay_ms

    def setup(self, stage: str) -> None:
        self.train_set = SlowReads(self.n_train, size=32, num_classes=4, delay_ms=self.delay_ms, seed=0)
        self.val_set = SlowReads(self.batch_size, size=32, num_classes=4, delay_ms=self.val_delay_ms, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.workers,
            persistent_workers=self.workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=4.0, help="each item's wait")
    p.add_argument("--val-delay-ms", type=float, default=4.0, help="each validation item's wait (one batch of them)")
    p.add_argument("--width", type=int, default=8, help="the network's width: 48 makes the step the slow part")
    args = p.parse_args()
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = Images(args.n_train, args.delay_ms, args.val_delay_ms, args.batch_size, args.workers)
    trainer.fit(Classifier(args.width), datamodule=data)


if __name__ == "__main__":
    main()
