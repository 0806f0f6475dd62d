"""Lightning's own demo: `lightning.pytorch.demos.boring_classes`' BoringModel, fit by Lightning's Trainer on
the CPU from its BoringDataModule, both unchanged. The data module's RandomDataset (generated) is the demo's
class, each item after a wait.

    python -m tests.package_scripts.lightning_boring --epochs 40
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel, RandomDataset

from tests.package_scripts import SlowReads, options


class SlowRandomDataset(SlowReads, RandomDataset):
    """The demo's RandomDataset, each item after a wait."""


def main() -> None:
    args = options(__doc__)
    data = BoringDataModule()  # its setup() splits random_full: the first 64 items train, its loader batch 1
    data.random_full = SlowRandomDataset(32, 64 * 4)
    data.random_full.read_s = args.read_ms / 1000
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=4,
    )
    trainer.fit(BoringModel(), datamodule=data)


if __name__ == "__main__":
    main()
