"""A Hugging Face `Trainer` script as its users write it, evaluating each epoch.

It has a small BERT made from its config (no download), a Dataset of token ids, `TrainingArguments` and
`Trainer.train()`. Nothing of wif is in it: `wif-advise -- python -m examples.train_hf` finds the training
loader the Trainer makes (docs/advise.md). Its answer is in TrainingArguments' fields
(`dataloader_num_workers`, ...).

Each item waits `--delay-ms` on a read that takes no CPU. With `--delay-ms 0 --layers 4 --hidden 256` the step
is the slow part instead.

    python -m examples.train_hf --epochs 3 --delay-ms 4 --workers 0
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Dict

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Sentences(Dataset):
    """Item i: 32 seeded token ids and their class (its first token's parity), after `delay_ms` of waiting."""

    def __init__(self, n: int, delay_ms: float, seed: int, vocab: int = 1000, length: int = 32) -> None:
        self.n, self.delay_s, self.seed, self.vocab, self.length = n, delay_ms / 1000.0, seed, vocab, length

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(1, self.vocab, (self.length,), generator=g)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[0] % 2}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=4.0, help="each item's wait")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--hidden", type=int, default=32)
    args = p.parse_args()
    config = BertConfig(
        vocab_size=1000,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=2,
        intermediate_size=2 * args.hidden,
        max_position_embeddings=64,
        num_labels=2,
    )
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="train-hf-"),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=1e-3,
        dataloader_num_workers=args.workers,
        eval_strategy="epoch",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        logging_strategy="epoch",
    )
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=training,
        train_dataset=Sentences(args.n_train, args.delay_ms, seed=0),
        eval_dataset=Sentences(64, args.delay_ms, seed=1),
    )
    trainer.train()


if __name__ == "__main__":
    main()
