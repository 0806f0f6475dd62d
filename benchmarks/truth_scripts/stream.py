"""A step-based loop over an endless stream, left after `--max-steps` steps, as pretraining loops are written.

The IterableDataset never ends: item i is `Items`' item i mod `--n-train`, and each DataLoader worker takes its
own share by `get_worker_info()`, as torch's documentation asks.

    python benchmarks/truth_scripts/stream.py --max-steps 120 --num-workers 0
"""

from __future__ import annotations

import torch
from _panel import Items, loader_kwargs, parser, timed, tiny_model, train_epoch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    """Endless: worker k of K yields items k, k + K, k + 2K, ... of `items`, round and round."""

    def __init__(self, items: Items) -> None:
        self.items = items

    def __iter__(self):
        info = get_worker_info()
        i, step = (info.id, info.num_workers) if info is not None else (0, 1)
        while True:
            yield self.items[i % len(self.items)]
            i += step


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--max-steps", type=int, default=120, help="the steps to train, then the loop leaves")
    args = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Stream(Items(args.n_train, args.delay_ms)), batch_size=args.batch_size, **loader_kwargs(args))
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with timed() as clock:
        clock.epoch()
        train_epoch(model, opt, loader, max_steps=args.max_steps)


if __name__ == "__main__":
    main()
