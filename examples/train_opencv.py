"""A Dataset whose items run OpenCV and numpy's BLAS, each on all the cores' threads, trained with workers.

Each item blurs and resizes a 384x384 image with OpenCV and multiplies two 160x160 matrices with numpy. In
each worker both libraries start one thread a core: 2 workers on 2 cores run 4 threads of each. torch
limits only its own. `wif-advise` tries them limited (`worker_init_fn=wif.limit_worker_threads(1)`).

    python -m examples.train_opencv --epochs 3 --workers 2
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .models import small_cnn
from .train_classify import loop_options, parser, train


class Filtered(Dataset):
    """Class k: the mean of a blurred image's k-th quarter is the brightest; made on access, seeded by index."""

    def __init__(self, n: int, size: int = 32, classes: int = 4) -> None:
        self.n, self.size, self.classes = n, size, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        image = rng.random((384, 384, 3), dtype=np.float32)
        k = i % self.classes
        image[96 * k : 96 * k + 96] += 1.0
        image = cv2.GaussianBlur(image, (7, 7), 2.0)
        a = rng.random((160, 160), dtype=np.float32)
        image[:160, :160, 0] += 1e-6 * (a @ a)  # a BLAS call as a colour transform makes
        small = cv2.resize(image, (self.size, self.size), interpolation=cv2.INTER_AREA)
        return torch.from_numpy(small).permute(2, 0, 1).contiguous(), k


def main() -> None:
    args = parser(__doc__, batch_size=32, n_train=512).parse_args()
    data = Filtered(args.n_train)
    loader = DataLoader(
        data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    train(small_cnn(num_classes=4, width=8), loader, args.epochs, torch.device("cpu"), loop=loop_options(args))


if __name__ == "__main__":
    main()
