"""How a host batch reaches the device, apart from the loader so any loader option combines with any transfer.

Under transfer.uint8=true the copy moves a quarter of float32's bytes. The images become float and are
normalized right after, on the copying stream (`to_float`, as timm's PrefetchLoader does).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import torch

from wif.config import TransferConfig, TransferKind
from wif.data.datasets import NORMALIZE_MEAN, NORMALIZE_STD
from wif.data.loaders import Batch, Batches, FixedBatches, ResidentBatches
from wif.measure.timing import blocking_copy

Transfer = Callable[[Batch], Batch]


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 images to the float32 the host path makes (scale to [0, 1], then normalize), on their own device."""
    return images.float().sub_(255 * NORMALIZE_MEAN).div_(255 * NORMALIZE_STD)


class Sent(tuple):
    """A device batch whose images crossed as uint8 (`wire_nbytes`, what `batch_nbytes` reports), converted after."""

    wire_nbytes: int

    def __new__(cls, images: torch.Tensor, labels: torch.Tensor, wire_nbytes: int) -> "Sent":
        batch = super().__new__(cls, (images, labels))
        batch.wire_nbytes = wire_nbytes
        return batch


def copy_to(device: torch.device, non_blocking: bool, uint8: bool = False) -> Transfer:
    """The copy of one host batch, queued on the current stream; under `uint8`, its images converted after it.
    A blocking copy is bracketed (`blocking_copy`) so a timed epoch can tell its wait behind the GPU's queued
    work from the copy itself."""

    def copy(batch: Batch) -> Batch:
        x, y = batch
        with contextlib.nullcontext() if non_blocking else blocking_copy(device):
            dx, dy = x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
        return Sent(to_float(dx), dy, batch_nbytes(batch)) if uint8 else (dx, dy)

    return copy


def on_device(batch: Batch) -> Batch:
    """The transfer of batches already on the device: gpu_resident's, or those a `StreamPrefetcher` copied."""
    return batch


def make_transfer(cfg: TransferConfig, device: torch.device, decode: Optional[Transfer] = None) -> Transfer:
    """The batch's way to the device: a copy, `decode` (data.decode=device), or nothing where it is there already."""
    if cfg.kind in (TransferKind.resident, TransferKind.stream):
        return on_device
    return decode or copy_to(device, cfg.non_blocking, cfg.uint8)


def batch_nbytes(batch: Any) -> int:
    """Bytes of a batch's tensors: what copying it moves, from host metadata; a `Sent` batch counts its uint8 bytes."""
    if isinstance(batch, Sent):
        return batch.wire_nbytes
    if isinstance(batch, torch.Tensor):
        return batch.nbytes
    if isinstance(batch, dict):
        batch = list(batch.values())
    if not isinstance(batch, (tuple, list)):
        return 0
    total = 0
    for b in batch:  # a tensor read in place: no call per tensor, as a step's (images, labels) is every step
        total += b.nbytes if isinstance(b, torch.Tensor) else batch_nbytes(b)
    return total


def copies_from_host(batches: Batches, transfer: Transfer) -> bool:
    """Whether the batches a run's loop receives were copied host-to-device (on a CPU device: would be).

    `data=fixed`, gpu_resident and `engine=dali` decoding on a GPU make their batches on the device: no copy. It
    looks through a run's wrappers (trainer.max_batches, transfer=stream); each keeps its batches as `.batches`.
    """
    source: Any = batches
    while not isinstance(source, (FixedBatches, ResidentBatches)) and hasattr(source, "batches"):
        source = source.batches
    if isinstance(source, (FixedBatches, ResidentBatches)) or getattr(source, "device_id", None) is not None:
        return False  # `device_id`: DaliBatches' GPU, None when it decodes on the CPU
    return transfer is not on_device or isinstance(batches, StreamPrefetcher)


# NOTE [ Side stream ]
# Correctness rests on two calls. The compute stream waits for the copy stream before it touches a batch
# (`wait_stream`). Each batch is marked as used by the compute stream (`record_stream`). Without that, the
# allocator could hand the batch's memory to the copy stream's next allocation while kernels still read it.
class StreamPrefetcher:
    """transfer=stream: any loader's batches as device batches, the next copied on a side CUDA stream.

    The copy overlaps the current batch's compute, as apex's ImageNet DataPrefetcher does (NOTE [ Side stream ]).
    Without CUDA the batches are plainly copied. Under `uint8` (transfer.uint8=true) the images are converted on
    the side stream after their copy; a batch is decoded there too (`decode`, data.decode=device).
    """

    def __init__(
        self,
        batches: Batches,
        device: torch.device,
        non_blocking: bool = True,
        uint8: bool = False,
        decode: Optional[Transfer] = None,
    ) -> None:
        self.batches, self.device, self.non_blocking = batches, device, non_blocking  # CPU: `warnings_for` says so
        self.copy = decode or copy_to(device, non_blocking, uint8)
        self.stream: Optional[torch.cuda.Stream] = None  # one for the run, made in the run's process on first use

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        if self.device.type != "cuda":
            for batch in self.batches:
                yield self.copy(batch)
            return
        if self.stream is None:  # not a new pool stream each epoch: the allocator reuses a freed block only on
            self.stream = torch.cuda.Stream(self.device)  # its own stream, so each new one reserved memory anew
        copy_stream = self.stream
        host = iter(self.batches)

        def preload() -> Optional[Batch]:
            """Fetch the next host batch and queue its copy on the side stream; None at the epoch's end."""
            try:
                batch = next(host)
            except StopIteration:
                return None
            with torch.cuda.stream(copy_stream):  # allocated, copied (and converted) on the side stream
                return self.copy(batch)

        ahead = preload()
        while ahead is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(copy_stream)  # queued on the device: the host does not block
            for tensor in ahead:
                tensor.record_stream(compute)
            batch, ahead = ahead, preload()  # the next copy overlaps this batch's compute
            yield batch
