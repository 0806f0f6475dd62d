"""PyTorch Lightning's `Trainer.fit` with a validation pass after each epoch: a LightningModule and a
LightningDataModule whose `train_dataloader()` takes the DataLoader flags. The validation loader keeps its own
settings (0 workers), as wif-advise's paste line is for `train_dataloader()` only.

    python benchmarks/truth_scripts/lightning_val.py --epochs 4 --num-workers 0
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from _panel import Clock, Items, loader_kwargs, parser, timed, tiny_model
from torch.nn import functional as F
from torch.utils.data import DataLoader


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = tiny_model()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.model(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Data(L.LightningDataModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args

    def setup(self, stage: str) -> None:
        self.train_set = Items(self.args.n_train, self.args.delay_ms, seed=0)
        self.val_set = Items(self.args.n_val, self.args.delay_ms, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.args.batch_size, shuffle=True, **loader_kwargs(self.args))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.args.batch_size)


class EpochStarts(L.Callback):
    """The clock told of each training epoch's start (the validation runs at its end)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.clock.epoch()


def main() -> None:
    p = parser(__doc__, epochs=4)
    p.add_argument("--n-val", type=int, default=64, help="items validated after each epoch")
    args = p.parse_args()
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with timed() as clock:
        trainer.callbacks.append(EpochStarts(clock))
        trainer.fit(Classifier(), datamodule=Data(args))


if __name__ == "__main__":
    main()
