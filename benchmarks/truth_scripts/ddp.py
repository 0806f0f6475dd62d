"""DistributedDataParallel on gloo, one process a rank, as `torchrun` starts it; a DistributedSampler shards the
items and `set_epoch` reshuffles them every epoch. Each rank prints its own training time; the job's is the
slowest rank's.

    python -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/truth_scripts/ddp.py --epochs 4
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _panel import Items, loader_kwargs, parser, timed, tiny_model, train_epoch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


def main() -> None:
    args = parser(__doc__).parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = Items(args.n_train, args.delay_ms)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, **loader_kwargs(args))
    model = DistributedDataParallel(tiny_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dist.barrier()  # both ranks start the clock together
    with timed() as clock:
        for epoch in range(args.epochs):
            clock.epoch()
            sampler.set_epoch(epoch)
            train_epoch(model, opt, loader)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
