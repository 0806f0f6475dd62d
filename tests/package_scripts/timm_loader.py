"""timm's real loader: `timm.data.create_loader` over timm's ImageDataset of a generated JPEG folder, with its
training transforms, fast_collate and PrefetchLoader (normalizing on the CPU here), all unchanged. A plain
training loop of a linear classifier is written around it: a small step, so that the loader is what shows.

    python -m tests.package_scripts.timm_loader --epochs 40 --data images/train
"""

from __future__ import annotations

import torch
from timm.data import ImageDataset, create_loader

from tests.package_scripts import SlowReads, options


class SlowImageDataset(SlowReads, ImageDataset):
    """timm's ImageDataset, each image read after a wait."""


def main() -> None:
    args = options(__doc__)
    dataset = SlowImageDataset(args.data)
    dataset.read_s = args.read_ms / 1000
    cpu = torch.device("cpu")
    loader = create_loader(
        dataset, input_size=(3, 32, 32), batch_size=args.batch_size, is_training=True, num_workers=0, device=cpu
    )
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, len(dataset.reader.class_to_idx)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.epochs):
        for images, target in loader:
            loss = torch.nn.functional.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
