"""A Dataset whose items wait 4 ms each on a read that takes no CPU, trained by the classification loop.

The read is a `time.sleep`, as a network read is. At 0 workers the step waits on the data; workers overlap
the waits even on 2 cores.

    python -m examples.train_slow_reads --epochs 3 --workers 0
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from wif.advisor.examples import SlowReads

from .models import small_cnn
from .train_classify import loop_options, parser, train


def main() -> None:
    p = parser(__doc__, batch_size=64, n_train=512)
    p.add_argument("--delay-ms", type=float, default=4.0, help="each item's wait")
    args = p.parse_args()
    data = SlowReads(args.n_train, size=32, num_classes=4, delay_ms=args.delay_ms, seed=0)
    loader = DataLoader(
        data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    train(small_cnn(num_classes=4, width=8), loader, args.epochs, torch.device("cpu"), loop=loop_options(args))


if __name__ == "__main__":
    main()
