"""Gradient accumulation, clipping and a per-update learning-rate schedule (what `wif.time_epochs` could not
keep): the loop stays as it is; only the loader is watched. A regression task.

    python -m examples.train_accumulate --epochs 3 --accumulate 4
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import wif

from .train_classify import parser


def main() -> None:
    p = parser(__doc__, batch_size=16, n_train=2048)
    p.add_argument("--accumulate", type=int, default=4, help="batches per optimizer update")
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.n_train, 64, generator=g)
    y = x @ torch.randn(64, 1, generator=g) + 0.1 * torch.randn(args.n_train, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    updates = args.epochs * len(loader) // args.accumulate
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=max(updates, 1) + 1)
    for epoch in range(args.epochs):
        for i, (xb, yb) in enumerate(wif.watch(loader)):  # the one line
            loss = nn.functional.mse_loss(model(xb), yb) / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate == 0:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                schedule.step()
                opt.zero_grad(set_to_none=True)
        print(f"epoch {epoch}: last loss {args.accumulate * loss.item():.4f}, lr {schedule.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
