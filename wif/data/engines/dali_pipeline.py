"""engine=dali: an NVIDIA DALI pipeline per epoch, in DALI's own shape (below).

It decodes with nvJPEG on a GPU (device="mixed"), else on "cpu", with the torchvision path's steps. It reads the
images the other engines read. num_workers maps to num_threads, the batches in flight to prefetch_queue_depth.
Built every epoch, it keeps DataLoader's seeded order and drop_last=False.

    fn.external_source -> fn.decoders.image -> fn.resize -> [fn.random_resized_crop]
    -> fn.crop_mirror_normalize -> DALIGenericIterator
"""

from __future__ import annotations

from typing import Iterator, List, Optional

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

from wif.config import Augment
from wif.data.datasets import NORMALIZE_MEAN, NORMALIZE_STD, DecodedSplit
from wif.data.engines.common import Request, in_flight, num_batches, sample_order
from wif.data.folder import ImageFiles, JpegBlob
from wif.data.loaders import Batch


def encoded_bytes(split: DecodedSplit) -> List[np.ndarray]:
    """Each sample's encoded image, as DALI's decoder takes it: the bytes the other engines decode."""
    source = split.decoder
    if isinstance(source, JpegBlob):
        blob, offsets = source.blob.numpy(), source.offsets.numpy()
        return [blob[offsets[j] : offsets[j + 1]] for j in split.indices]
    if isinstance(source, ImageFiles):
        return [np.fromfile(source.paths[j], dtype=np.uint8) for j in split.indices]
    raise TypeError(f"engine=dali reads encoded images; {type(source).__name__} holds decoded ones")


class DaliBatches:
    """One DALI pipeline per epoch, over the epoch's order; batches as (images, labels) tensors."""

    def __init__(self, req: Request, augment: Augment, image_size: int, device: Optional[torch.device]) -> None:
        """Read `req`'s split, a DecodedSplit (wif.config.validate: data=encoded or folder); DALI pins its own.

        Args:
            req: the split and the loader option.
            augment: data.augment, on the training split.
            image_size: the size a batch's images have.
            device: the GPU it decodes on; None or a CPU: it decodes on the CPU.
        """
        split, loader, batch_size, train, seed = req.split, req.loader, req.batch_size, req.train, req.seed
        self.samples = encoded_bytes(split)
        self.labels = [np.asarray(int(split.labels[j]), dtype=np.int64) for j in split.indices]
        self.sampler = sample_order(split, loader.shuffle and train, seed)
        self.batch_size, self.threads, self.seed, self.epoch = batch_size, loader.num_workers, seed, 0
        self.depth = max(in_flight(loader, req.engine) // max(loader.num_workers, 1), 1)
        self.augment = augment if train else Augment.none
        self.size = image_size
        self.device_id = (device.index or 0) if device is not None and device.type == "cuda" else None

    def _source(self, order: List[int]):
        """The external source's callback: batch `info.iteration` of the epoch's `order`."""

        def batch(info):
            picked = order[info.iteration * self.batch_size : (info.iteration + 1) * self.batch_size]
            if not picked:
                raise StopIteration
            return [self.samples[i] for i in picked], [self.labels[i] for i in picked]

        return batch

    def _pipeline(self, order: List[int]):
        """The epoch's pipeline over `order`."""

        @pipeline_def(
            batch_size=self.batch_size,
            num_threads=self.threads,
            device_id=self.device_id,
            prefetch_queue_depth=self.depth,
            seed=self.seed * 100_003 + self.epoch,
        )
        def pipe():
            encoded, labels = fn.external_source(
                source=self._source(order), num_outputs=2, batch=True, batch_info=True, dtype=[types.UINT8, types.INT64]
            )
            images = fn.decoders.image(
                encoded, device="cpu" if self.device_id is None else "mixed", output_type=types.RGB
            )
            images = fn.resize(images, resize_x=self.size, resize_y=self.size, antialias=True)
            if self.augment is Augment.standard:
                images = fn.random_resized_crop(images, size=[self.size, self.size], antialias=True)
            flip = fn.random.coin_flip() if self.augment in (Augment.flip, Augment.standard) else 0
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.FLOAT,
                output_layout="CHW",
                mirror=flip,
                mean=[255 * NORMALIZE_MEAN] * 3,
                std=[255 * NORMALIZE_STD] * 3,
            )
            # A label copy from DALI's pageable host output would block behind queued kernels: gpu_blocked_s.
            return images, labels if self.device_id is None else labels.gpu()

        return pipe()

    def __iter__(self) -> Iterator[Batch]:
        order = list(iter(self.sampler))
        self.epoch += 1
        pipe = self._pipeline(order)
        pipe.build()
        for out in DALIGenericIterator(pipe, ["x", "y"], last_batch_policy=LastBatchPolicy.PARTIAL):
            yield out[0]["x"], out[0]["y"].view(-1)

    def __len__(self) -> int:
        return num_batches(self.labels, self.batch_size)
