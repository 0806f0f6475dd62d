"""How a host batch reaches the device. Kept apart from the loader so any loader option can be combined
with any transfer option on the command line."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import torch

from wif.config import TransferConfig, TransferKind
from wif.data.loaders import Batch, Batches, FixedBatches, ResidentBatches

Transfer = Callable[[Batch], Batch]


def on_device(batch: Batch) -> Batch:
    """The transfer of batches already on the device: gpu_resident's, or those a `StreamPrefetcher` copied."""
    return batch


def make_transfer(cfg: TransferConfig, device: torch.device) -> Transfer:
    """A blocking or non_blocking copy, or nothing for batches already on the device (resident, or copied
    by a `StreamPrefetcher` before the loop sees them)."""
    if cfg.kind in (TransferKind.resident, TransferKind.stream):
        return on_device
    non_blocking = cfg.non_blocking

    def copy(batch: Batch) -> Batch:
        x, y = batch
        return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

    return copy


def batch_nbytes(batch: Any) -> int:
    """Bytes of a batch's tensors (in tuples, lists or dicts): what copying it to the device moves, as a copy
    keeps dtype and shape. `nbytes` is shape times item size, host metadata: reading it never syncs."""
    if isinstance(batch, torch.Tensor):
        return batch.nbytes
    if isinstance(batch, dict):
        batch = list(batch.values())
    return sum(batch_nbytes(b) for b in batch) if isinstance(batch, (tuple, list)) else 0


def copies_from_host(batches: Batches, transfer: Transfer) -> bool:
    """Whether the batches a run's loop receives were copied host-to-device (on a CPU device: would be).

    Not for data=fixed (`FixedBatches`, made on the device) nor gpu_resident (`ResidentBatches`, gathered
    there), on any device; nor for engine=dali decoding on a GPU, whose batches come out on the device.
    Looks through the wrappers a run puts around its batches (trainer.max_batches, transfer=stream): each
    keeps the batches it wraps as `.batches`."""
    source: Any = batches
    while not isinstance(source, (FixedBatches, ResidentBatches)) and hasattr(source, "batches"):
        source = source.batches
    if isinstance(source, (FixedBatches, ResidentBatches)) or getattr(source, "device_id", None) is not None:
        return False  # `device_id`: DaliBatches' GPU, None when it decodes on the CPU
    return transfer is not on_device or isinstance(batches, StreamPrefetcher)


class StreamPrefetcher:
    """transfer=stream: wraps any loader's batches and yields device batches, copying the next one on a side
    CUDA stream while the current one computes (the DataPrefetcher of NVIDIA's apex ImageNet example).

    Correctness rests on two calls: the compute stream waits for the copy stream before it touches a
    batch (`wait_stream`), and each batch is marked as used by the compute stream (`record_stream`) so
    the allocator does not hand its memory to the copy stream's next allocation while kernels still read
    it. On a device without CUDA there is no stream to overlap on: the batches are plainly copied.
    """

    def __init__(self, batches: Batches, device: torch.device, non_blocking: bool = True) -> None:
        self.batches, self.device, self.non_blocking = batches, device, non_blocking  # CPU: `warnings_for` says so

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        if self.device.type != "cuda":
            for x, y in self.batches:
                yield x.to(self.device), y.to(self.device)
            return
        copy_stream = torch.cuda.Stream(self.device)
        host = iter(self.batches)

        def preload() -> Optional[Batch]:
            """Fetch the next host batch and queue its copy on the side stream; None at the epoch's end."""
            try:
                x, y = next(host)
            except StopIteration:
                return None
            with torch.cuda.stream(copy_stream):  # allocated and copied on the side stream
                nb = self.non_blocking
                return x.to(self.device, non_blocking=nb), y.to(self.device, non_blocking=nb)

        ahead = preload()
        while ahead is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(copy_stream)  # queued on the device: the host does not block
            x, y = ahead
            x.record_stream(compute)
            y.record_stream(compute)
            ahead = preload()  # the next copy overlaps this batch's compute
            yield x, y
