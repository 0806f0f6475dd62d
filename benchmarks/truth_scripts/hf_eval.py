"""A Hugging Face `Trainer` that evaluates after each epoch: a one-layer BERT made from its config (no download)
over token ids that wait on a read. The DataLoader flags become TrainingArguments' `dataloader_*` fields, which
the Trainer's training and evaluation loaders both take; `--in-order` has no such field and is not applied.

    python benchmarks/truth_scripts/hf_eval.py --epochs 3 --n-train 480 --num-workers 0
"""

from __future__ import annotations

import tempfile
import time
from typing import Dict

import torch
from _panel import Clock, parser, timed
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments


class Sentences(Dataset):
    """Item i: 16 seeded token ids and their class (the first token's parity), after `delay_ms` of waiting."""

    def __init__(self, n: int, delay_ms: float, seed: int) -> None:
        self.n, self.delay_s, self.seed = n, delay_ms / 1000.0, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        time.sleep(self.delay_s)
        ids = torch.randint(1, 500, (16,), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + i))
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[0] % 2}


class EpochStarts(TrainerCallback):
    """The clock told of each epoch's start (the evaluation runs after the epoch's end)."""

    clock: Clock

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.clock.epoch()


def main() -> None:
    p = parser(__doc__, n_train=480)
    p.add_argument("--n-eval", type=int, default=64, help="items evaluated after each epoch")
    args = p.parse_args()
    config = BertConfig(
        vocab_size=500,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=2,
    )
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="truth-hf-"),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=1e-3,
        dataloader_num_workers=args.num_workers,
        dataloader_prefetch_factor=args.prefetch_factor if args.num_workers else None,
        dataloader_persistent_workers=args.persistent_workers,
        dataloader_pin_memory=args.pin_memory,
        eval_strategy="epoch",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        logging_strategy="epoch",
        use_cpu=True,
    )
    starts = EpochStarts()
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=training,
        train_dataset=Sentences(args.n_train, args.delay_ms, seed=0),
        eval_dataset=Sentences(args.n_eval, args.delay_ms, seed=1),
        callbacks=[starts],
    )
    with timed() as starts.clock:
        trainer.train()


if __name__ == "__main__":
    main()
