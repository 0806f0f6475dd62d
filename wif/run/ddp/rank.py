"""One rank of a data-parallel run, as the elastic launcher starts it.

A rank trains the model wrapped in DDP on its shard of every split. The run's figures are gathered at each
epoch's end, where rank 0 sends the job's to the supervisor. Any rank that fails says why, in one line.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Client, Connection
from typing import Any, Dict, List

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler, Sampler

from wif.config import Config
from wif.config.exits import quick_exit
from wif.measure.lifetime import die_with_parent
from wif.run.ddp.gather import job_epoch, job_result
from wif.run.forking import interrupt, said_error
from wif.run.training import train


class RankSide:
    """What `wif.run.training.train` asks of a rank (`Ranks`), and the `emit` it reports through."""

    def __init__(self, conf: Config, conn: Connection, device: torch.device) -> None:
        self.conf, self.conn, self.device = conf, conn, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.samplers: List[DistributedSampler] = []
        self.indices: Dict[int, List[int]] = {}  # measure.rank_indices: the train shard's order, per epoch

    def sampler(self, dataset: Dataset, shuffle: bool) -> Sampler:
        """This rank's shard of a split."""
        s = DistributedSampler(dataset, num_replicas=self.world, rank=self.rank, shuffle=shuffle, seed=self.conf.seed)
        self.samplers.append(s)
        return s

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as a DDP replica."""
        return DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def begin_epoch(self, epoch: int) -> None:
        """Draw every shard's order for this epoch (`set_epoch`: PyTorch #31771), then meet the other ranks."""
        for s in self.samplers:
            s.set_epoch(epoch)
        if self.conf.measure.rank_indices and self.samplers and self.samplers[0].shuffle:
            self.indices[epoch] = [int(i) for i in self.samplers[0]]
        dist.barrier()

    def _gather(self, payload: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Every rank's payload, in rank order."""
        rows: List[Any] = [None] * self.world
        dist.all_gather_object(rows, payload)
        return rows

    def emit(self, kind: str, payload: Dict[str, Any]) -> Any:
        """Report as `train` does, every rank in the same order: epochs and the result gathered, the rest rank 0's."""
        if kind == "epoch":
            rows = self._gather(payload)
            answer: List[Any] = [None]
            if self.rank == 0:
                self.conn.send(("epoch", job_epoch(rows)))
                answer[0] = self.conn.recv()
            dist.broadcast_object_list(answer, src=0)
            return answer[0]
        if kind == "result":
            rows = self._gather(payload)
            shards = self._gather({"indices": self.indices}) if self.conf.measure.rank_indices else []
            if self.rank == 0:
                if shards:
                    self.conn.send(
                        (
                            "artifact",
                            {"name": "rank_indices.json", "data": {str(i): s["indices"] for i, s in enumerate(shards)}},
                        )
                    )
                self.conn.send(("result", job_result(rows)))
            return None
        if self.rank == 0:
            self.conn.send((kind, payload))
        return None


@dataclass(frozen=True)
class RankLink:
    """What every rank starts with beside the configuration: its run process, and how to run there."""

    device_type: str  # "cuda" or "cpu"
    address: str  # the relay's listener in the run process
    authkey: bytes
    threads: int  # torch's intra-op threads for this rank
    agent: int  # the launcher's pid: the rank dies with it
    start_method: str  # the run process's default start method. See NOTE [ A rank's start method ]


# NOTE [ A rank's start method ]
# A rank spawned by the launcher inherits `spawn` as its default start method, and its DataLoader workers
# would then be spawned too. Measured here: ~10 s to a first batch every epoch, where forked workers take
# 0.1 s. Under torchrun each rank is a fresh interpreter with the platform's default. So the run process's
# default is restored, and loader.multiprocessing_context=null means what it means in a one-process run.


def rank_main(conf: Config, link: RankLink) -> None:
    """The launcher's entrypoint; module-level, since spawned ranks unpickle it. Dies with the launcher."""
    die_with_parent(link.agent)
    quick_exit()  # a spawned rank ends through the interpreter's exit: its last collection would take a second
    multiprocessing.set_start_method(link.start_method, force=True)  # See NOTE [ A rank's start method ]
    signal.signal(signal.SIGTERM, interrupt)  # the launcher stopping its ranks: the DataLoader shut down
    torch.set_num_threads(link.threads)
    rank = int(os.environ["RANK"])
    conn = Client(link.address, authkey=link.authkey)
    try:
        side = join_group(conf=conf, link=link, conn=conn)
        train(conf, side.device, side.emit, ranks=side)
        dist.destroy_process_group()
    except BaseException as err:  # noqa: BLE001 - every failure must be said, even Ctrl-C
        say_failure(conf, conn, err=err, rank=rank)


def join_group(conf: Config, link: RankLink, conn: Connection) -> RankSide:
    """Join the process group, with a timeout so no rank waits forever on a collective; tell the supervisor."""
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if link.device_type == "cuda" else torch.device("cpu")
    backend = "nccl" if link.device_type == "cuda" else "gloo"
    if link.device_type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=conf.trainer.dist_timeout_s),
        **({"device_id": device} if link.device_type == "cuda" else {}),
    )
    side = RankSide(conf, conn, device)
    # every rank (not rank 0 alone): the supervisor counts each rank's workers and reads each rank's GPU
    uuid = str(torch.cuda.get_device_properties(device).uuid) if link.device_type == "cuda" else None
    conn.send(("rank", {"rank": side.rank, "pid": os.getpid(), "uuid": uuid}))
    if side.rank == 0:
        tags = {
            "wif.world_size": str(side.world),
            "wif.dist_backend": backend,
            "wif.threads_per_rank": str(link.threads),
        }
        conn.send(("tags", tags))
    return side


def say_failure(conf: Config, conn: Connection, err: BaseException, rank: int) -> None:
    """Say in one line why this rank failed, then end it: exit code 130 after Ctrl-C, else 1.

    Args:
        conf: the run's configuration.
        conn: the rank's connection to the relay.
        err: what ended the rank.
        rank: the rank's number.
    """
    error = said_error(err, conf.loader.num_workers)
    message = error["message"].strip()  # said in one line: the run's reason
    error.update(message=f"rank {rank}: {message.splitlines()[0] if message else error['type']}", t=time.time())
    try:
        conn.send(("error", error))
    except OSError:
        pass  # the launcher is gone: the supervisor will say so
    raise SystemExit(130 if error["type"] == "KeyboardInterrupt" else 1) from None
