"""A distributed script under the watch (torchrun, torch.multiprocessing.spawn): one run for the job, as the
harness's DDP runs have it (wif.run.ddp.gather). Each rank times its own epochs of its training loader; at an
epoch's end, after its clock stopped, the ranks gather their figures (one all_gather of a few floats) and
rank 0 logs the job's epoch: the slowest rank's, each rank's beside it as rank{i}_... . Under wif-advise's
orders rank 0 decides when the measurement has what it needs and every rank hears it at the same epoch's
end, so the ranks leave together (a rank left behind would wait in its next all-reduce for good).

Only the training loader's epochs (gradients enabled at its first epoch, where every rank iterates it) meet
in these collectives: a validation loop that only rank 0 runs is never waited for.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

import torch

KEYS = ("epoch_time_s", "data_wait_s", "copy_s", "compute_s", "first_batch_s", "samples", "t_start", "t_end")


def world() -> Tuple[int, int]:
    """(this rank, the number of ranks) where torch.distributed is initialized, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _device() -> torch.device:
    """Where the collectives' tensors live: NCCL takes CUDA tensors, gloo and others host tensors."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather(epoch: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every rank's figures of the epoch that just ended, in rank order (a collective: every rank calls it)."""
    import torch.distributed as dist

    mine = torch.tensor([_float(epoch.get(k)) for k in KEYS], dtype=torch.float64, device=_device())
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    return [{k: (None if math.isnan(v) else v) for k, v in zip(KEYS, row.tolist())} for row in rows]


def decided(done: bool) -> bool:
    """Rank 0's answer, heard by every rank at the same epoch's end (a collective: every rank calls it)."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if done else 0.0], device=_device())
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)
