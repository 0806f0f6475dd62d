"""A segmentation loop (not classification): dict batches {"image", "mask", "name"}, a per-pixel loss.

python -m examples.train_segment --epochs 3 --workers 0
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import wif

from .train_classify import parser


class Blobs(Dataset):
    """An image with a bright disc in noise; its mask marks the disc (class 1) against the background."""

    def __init__(self, n: int, size: int = 48) -> None:
        self.n, self.size = n, size
        r = torch.arange(size, dtype=torch.float32)
        self.yy, self.xx = torch.meshgrid(r, r, indexing="ij")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        cy, cx, radius = (torch.rand(3, generator=g) * torch.tensor([self.size, self.size, self.size / 4])).tolist()
        mask = ((self.yy - cy) ** 2 + (self.xx - cx) ** 2 < (radius + 3) ** 2).long()
        image = 0.5 * torch.randn(3, self.size, self.size, generator=g) + mask.float()
        return {"name": f"blob{i:05d}", "image": image, "mask": mask}


def main() -> None:
    args = parser(__doc__, batch_size=32, n_train=512).parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(
        Blobs(args.n_train),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 2, 1)
    ).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for batch in wif.watch(loader):  # the one line: dict batches are counted by their first tensor
            image, mask = batch["image"].to(device), batch["mask"].to(device)
            loss = nn.functional.cross_entropy(net(image), mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
