"""engine=nodes_threads and engine=nodes_procs: a torchdata.nodes graph, as torchdata's guide migrates a DataLoader.

A worker makes whole batches, as a DataLoader worker does; torchdata.nodes 0.11 has no persistent workers.
Two of its habits are undone here. Its threads call `torch.set_num_threads(1)`, process-wide, so the loop's
thread restores the count once the workers run. Its worker processes would outlive a killed run, so they
start through `DyingContext` (`wif.measure.lifetime`).

    SamplerWrapper -> Batcher -> ParallelMapper (fetch, collate; `num_workers` threads or
    processes, inline at 0) -> PinMemory (CUDA) -> Prefetcher -> Loader
"""

from __future__ import annotations

import gc
from typing import Iterator

import torch
from torchdata import nodes

from wif.data.engines.common import FetchBatch, Request, in_flight, num_batches, sample_order
from wif.data.loaders import Batch, dataset_of
from wif.measure.lifetime import DyingContext


class NodesBatches:
    """One `Loader` for the run; each epoch's iterator resets the graph (and starts its workers)."""

    def __init__(self, req: Request, method: str) -> None:
        loader, batch_size, seed = req.loader, req.batch_size, req.seed
        self.dataset = dataset_of(req.split)
        self.batch_size = batch_size
        node = nodes.Batcher(
            nodes.SamplerWrapper(sample_order(self.dataset, loader.shuffle and req.train, seed)),
            batch_size,
            drop_last=False,
        )
        fetch = FetchBatch(self.dataset, seed)
        workers = loader.num_workers
        if workers == 0:
            node = nodes.Mapper(node, fetch)
        else:
            context = loader.multiprocessing_context.value if loader.multiprocessing_context else None
            node = nodes.ParallelMapper(
                node,
                fetch,
                num_workers=workers,
                in_order=loader.in_order,
                method=method,
                multiprocessing_context=context,
            )
            if method == "process":  # torchdata.nodes 0.11 starts its processes from this (private) context
                node._it._mp_context = DyingContext(node._it._mp_context)
        if req.pin:
            node = nodes.PinMemory(node)
        if workers:
            node = nodes.Prefetcher(node, prefetch_factor=in_flight(loader, req.engine))
        self.loader = nodes.Loader(node)
        self.threads = torch.get_num_threads()  # read (and so fixed for this thread) before any worker starts

    def __iter__(self) -> Iterator[Batch]:
        """Worker processes fork while the first batch is awaited. The collector is frozen meanwhile, so
        they never collect the parent's finished iterators, whose `__del__` fails in a child process."""
        gc.freeze()
        it = iter(self.loader)
        try:
            first = next(it)
        except StopIteration:
            return
        finally:
            gc.unfreeze()
            torch.set_num_threads(self.threads)  # the workers have started, and set theirs
        yield first
        yield from it

    def __len__(self) -> int:
        return num_batches(self.dataset, self.batch_size)
