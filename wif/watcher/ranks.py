"""A distributed script under the watch, by torchrun or torch.multiprocessing.spawn: one run for the job.

Each rank times its own epochs of its training loader, as the harness's DDP runs do (wif.run.ddp.gather).
After an epoch's clock stopped, one all_gather of a few floats brings the ranks' figures together. Rank 0
logs the job's epoch: the slowest rank's, each rank's beside it as rank{i}_... .

Under orders, rank 0 decides when the measurement has what it needs, and every rank hears it at the same
epoch's end. A rank left behind would wait in its next all-reduce for good. Under the watch alone, rank 0's
clock sets a window's count (`count_for`), so no rank gathers where another does not (NOTE [ Windows ]).
Only the training loader's epochs meet in these collectives; a validation loop of rank 0 alone is never waited for.
A rank the watch ends has its process group destroyed at exit, as the script's own end would have (`destroy_at_exit`).
"""

from __future__ import annotations

import atexit
import math
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch

from wif.measure import names

KEYS = (
    names.EPOCH_TIME_S,
    names.DATA_WAIT_S,
    names.COPY_S,
    names.COMPUTE_S,
    names.FIRST_BATCH_S,
    "samples",
    "t_start",
    "t_end",
    "batches",
)


def world() -> Tuple[int, int]:
    """This rank and the number of ranks where torch.distributed is initialized, else 0 and 1."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def job_root() -> Optional[int]:
    """The process whose tree holds this job's ranks on this machine: torchrun's agent (TORCHELASTIC_RUN_ID), or
    the process that spawned the ranks. None where this process is no rank, or its parent is no launcher of
    the job alone (srun starts each rank under its own slurmstepd)."""
    import multiprocessing

    if world()[1] < 2:
        return None
    if os.environ.get("TORCHELASTIC_RUN_ID") or multiprocessing.parent_process() is not None:
        return os.getppid()
    return None


def _device() -> torch.device:
    """Where the collectives' tensors live: NCCL takes CUDA tensors, gloo and others host tensors."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather(epoch: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every rank's figures of the epoch that just ended, in rank order. A collective: every rank calls it."""
    import torch.distributed as dist

    mine = torch.tensor([_float(epoch.get(k)) for k in KEYS], dtype=torch.float64, device=_device())
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    return [{k: (None if math.isnan(v) else v) for k, v in zip(KEYS, row.tolist())} for row in rows]


def decided(done: bool) -> bool:
    """Rank 0's answer, heard by every rank at the same epoch's end. A collective: every rank calls it."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if done else 0.0], device=_device())
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def destroy_at_exit() -> None:
    """Where the watch ends a distributed script, destroy its default process group at exit, as its own end would.

    Left to the interpreter's teardown, gloo's threads free tensors that need the GIL, and the rank aborts:
    "terminate called without an active exception", SIGABRT, a failed torchrun job (pytorch#179291).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        atexit.register(_destroy_if_alive)


def _destroy_if_alive() -> None:
    """The default process group destroyed, unless the script's own `finally` did it."""
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception as err:  # noqa: BLE001 - at exit: one line, never a traceback
        print(f"wif.watch: the process group was not destroyed at exit ({err})", file=sys.stderr)


def count_for(rows: List[Dict[str, Any]], seconds: Optional[float]) -> Optional[int]:
    """The batches of a window of `seconds` at rank 0's gathered pace; None: one window an epoch."""
    lead = rows[0]
    batches, took = lead.get("batches") or 0, lead.get(names.EPOCH_TIME_S) or 0.0
    if not seconds or batches < 1 or took <= 0:
        return None
    return max(1, math.ceil(seconds * batches / took))


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)
