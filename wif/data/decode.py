"""data.decode=device: the loader's workers hand over each image's encoded bytes; the device decodes them.

CUDA cannot run in forked workers, so the main process decodes, resizes, crops, flips and normalizes each
batch on the device. A batch crosses from a worker as three tensors (`EncodedBatch`). `DeviceDecode` decodes its
JPEGs in one batched call. nvJPEG's hardware engine refuses progressive, lossless and arithmetic JPEGs; each
epoch counts them (`decode_slow_path_images`). Non-JPEG files are decoded on the CPU.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import Dataset

from wif.config import Augment, DataConfig, DecodeBackend
from wif.data.datasets import AnySplit, Datasets, DecodedSplit, PerSample, make_transform
from wif.data.formats.shards import ShardSplit
from wif.data.transfer import Sent, to_float
from wif.measure import names
from wif.measure.timing import blocking_copy

FULL_SPEED_SOF = (0xC0, 0xC1)  # baseline and extended sequential Huffman: nvJPEG's hardware (batched) path
SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers (C4, C8, CC are not frames)
STANDALONE = frozenset(range(0xD0, 0xDA)) | {0x01}  # markers without a length: RSTn, SOI, EOI, TEM


@dataclass(frozen=True)
class Plan:
    """What the host path does to one split's decoded image, done on the device instead."""

    size: Optional[int]  # resized to size x size on decoding (data=folder without augment=standard); None: as is
    augment: Augment
    image_size: int
    train: bool
    native: bool  # at its own size: evaluated on Resize + CenterCrop, as the host path

    def steps(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The host's per-sample steps for this split, before its float conversion and normalization."""
        return make_transform(self.augment, self.image_size, self.train, native=self.native, uint8=True)


class EncodedBatch:
    """A batch as the workers hand it over: every image's encoded bytes in one blob, their offsets, the labels,
    and the split's plan. Not a tuple: DataLoader pins it through `pin_memory`, and would make a tuple a list."""

    def __init__(self, blob: torch.Tensor, offsets: torch.Tensor, labels: torch.Tensor, plan: Plan) -> None:
        self.blob, self.offsets, self.labels, self.plan = blob, offsets, labels, plan

    def __len__(self) -> int:
        return len(self.labels)

    def images(self) -> List[torch.Tensor]:
        """Each image's bytes: views of the blob (pinned with it)."""
        bounds = self.offsets.tolist()
        return [self.blob[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def nbytes(self) -> int:
        """What crosses to the device: the bytes and the labels (the offsets are read on the host)."""
        return self.blob.nbytes + self.labels.nbytes

    def pin_memory(self) -> "EncodedBatch":
        """The batch with its bytes and labels pinned."""
        return EncodedBatch(self.blob.pin_memory(), self.offsets, self.labels.pin_memory(), self.plan)


class Collate:
    """A split's collate_fn (DataLoader takes it from the dataset's `collate`): samples into an `EncodedBatch`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, samples: Sequence[Tuple[torch.Tensor, torch.Tensor]]) -> EncodedBatch:
        data = [s[0] for s in samples]
        offsets = torch.zeros(len(data) + 1, dtype=torch.int64)
        offsets[1:] = torch.tensor([len(d) for d in data], dtype=torch.int64).cumsum(0)
        return EncodedBatch(torch.cat(data), offsets, torch.stack([torch.as_tensor(s[1]) for s in samples]), self.plan)


class EncodedSplit(PerSample):
    """A split decoded per sample (`DecodedSplit`) whose samples are its images' bytes as stored."""

    def __init__(self, split: DecodedSplit, plan: Plan) -> None:
        self.decoder, self.labels, self.indices = split.decoder, split.labels, split.indices
        self.collate = Collate(plan)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        j = int(self.indices[i])
        return self.decoder.encoded(j), self.labels[j]


def encoded_split(split: AnySplit, cfg: DataConfig, train: bool) -> Dataset:
    """The split handing out encoded bytes, with the plan of what the host path did after decoding."""
    source = split if isinstance(split, ShardSplit) else getattr(split, "decoder", None)
    if source is None or not (isinstance(split, ShardSplit) or hasattr(source, "encoded")):
        raise TypeError(f"data.decode=device: a {type(split).__name__} holds no encoded images")  # validate refuses
    plan = Plan(
        size=getattr(source, "size", None),
        augment=cfg.augment,
        image_size=cfg.image_size,
        train=train,
        native=getattr(source, "native", False),
    )
    if isinstance(split, ShardSplit):
        shards = copy.copy(split)
        shards.encoded, shards.collate = True, Collate(plan)
        return shards
    return EncodedSplit(split, plan)


def encoded_datasets(data: Datasets, cfg: DataConfig) -> Datasets:
    """Every split handing out encoded bytes (data.decode=device); the training split with its augmentation."""
    return replace(
        data,
        train=encoded_split(data.train, cfg, True),
        val=encoded_split(data.val, cfg, False),
        test=encoded_split(data.test, cfg, False),
    )


def jpeg_kind(data: torch.Tensor) -> str:
    """'fast' for a baseline or extended sequential JPEG, 'slow' for another JPEG, 'other' for what is not one.

    Other JPEGs are progressive, lossless or arithmetic. It walks the markers up to the frame header: a few reads.
    """
    a = data.numpy()
    n = len(a)
    if n < 4 or a[0] != 0xFF or a[1] != 0xD8:
        return "other"
    pos = 2
    while pos + 3 < n:
        if a[pos] != 0xFF:
            return "slow"  # not a marker where one must be: let the decoder judge, on its careful path
        marker = int(a[pos + 1])
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in SOF:
            return "fast" if marker in FULL_SPEED_SOF else "slow"
        pos += 2 if marker in STANDALONE else 2 + (int(a[pos + 2]) << 8 | int(a[pos + 3]))
    return "slow"


# NOTE [ The decode stream ]
# torchvision's decoder allocates its outputs on the current stream but writes them from a private stream that
# never waits for it. nvJPEG's hardware engine writes ahead of work queued on its stream (pytorch/vision#9606,
# meta-pytorch/torchcodec#1634). So a block the caller's stream freed while its queued kernels still read it
# could be handed out and overwritten. The decoder therefore runs on a stream of its own, where no other work
# is queued: every block the allocator hands it is free of pending readers. The images are marked as used by
# the caller's stream (`record_stream`): their blocks return to the decode stream only once the caller's
# kernels that read them have run. The caller's stream waits for the decode.

JpegDecoder = Callable[[List[torch.Tensor], torch.device], List[torch.Tensor]]


def jpeg_decoder(backend: DecodeBackend) -> Tuple[str, JpegDecoder]:
    """(name, decode a list of JPEGs to RGB uint8 on a device).

    `auto` takes torchcodec where it imports, else torchvision. torchcodec's build may not load with this torch.
    """
    if backend is not DecodeBackend.torchvision:
        try:
            from torchcodec.decoders import decode_jpeg as codec_jpeg

            return "torchcodec", lambda data, device: codec_jpeg(data, mode="RGB", device=device)
        except (ImportError, OSError, RuntimeError):
            if backend is DecodeBackend.torchcodec:
                raise
    from torchvision.io import ImageReadMode, decode_jpeg

    return "torchvision", lambda data, device: decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


class DeviceDecode:
    """The transfer of a run under data.decode=device: an `EncodedBatch` in, on the device the float batch out.

    The float batch is the one the host path would yield. `non_blocking` copies the labels as
    transfer.non_blocking asks. On CUDA the decoder runs on a stream of its own: see NOTE [ The decode stream ].
    """

    def __init__(
        self, device: torch.device, backend: DecodeBackend = DecodeBackend.auto, non_blocking: bool = False
    ) -> None:
        self.device, self.non_blocking = device, non_blocking
        self.backend, self.decode_jpegs = jpeg_decoder(backend)
        self.slow_path = 0
        self._steps: Dict[Plan, Callable[[torch.Tensor], torch.Tensor]] = {}
        self._stream: Optional[torch.cuda.Stream] = None  # the run's decode stream, made on first use

    def decode(self, data: List[torch.Tensor]) -> List[torch.Tensor]:
        """JPEGs to RGB uint8 images on the device, on the decode stream on CUDA (NOTE [ The decode stream ])."""
        if self.device.type != "cuda" or not data:
            return self.decode_jpegs(data, self.device) if data else []
        caller = torch.cuda.current_stream(self.device)
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._stream):
            images = self.decode_jpegs(data, self.device)
        caller.wait_stream(self._stream)
        for image in images:
            image.record_stream(caller)
        return images

    def __call__(self, batch: EncodedBatch) -> Sent:
        """The batch decoded, transformed and normalized on the device, its labels copied there."""
        from torchvision.io import ImageReadMode, decode_image
        from torchvision.transforms.v2.functional import resize

        data = batch.images()
        kinds = [jpeg_kind(d) for d in data]
        self.slow_path += sum(k != "fast" for k in kinds)
        jpegs = [i for i, k in enumerate(kinds) if k != "other"]
        images: List[Optional[torch.Tensor]] = [None] * len(data)
        for i, image in zip(jpegs, self.decode([data[i] for i in jpegs])):
            images[i] = image
        blocking = contextlib.nullcontext if self.non_blocking else functools.partial(blocking_copy, self.device)
        for i, kind in enumerate(kinds):
            if kind == "other":  # no device decoder for it: the CPU decodes, and the image is copied
                image = decode_image(data[i], mode=ImageReadMode.RGB)
                with blocking():
                    images[i] = image.to(self.device, non_blocking=self.non_blocking)
        plan = batch.plan
        steps = self._steps.setdefault(plan, plan.steps())
        out = [
            steps(img if plan.size is None else resize(img, [plan.size, plan.size], antialias=True)) for img in images
        ]
        with blocking():  # behind the step's kernels, and the resizes just queued: their part is the wait's
            labels = batch.labels.to(self.device, non_blocking=self.non_blocking)
        return Sent(to_float(torch.stack(out)), labels, batch.nbytes)

    def epoch_figures(self) -> Dict[str, float]:
        """The images decoded on a slower path since the last call; the run logs them per training epoch."""
        out, self.slow_path = {names.DECODE_SLOW_PATH_IMAGES: float(self.slow_path)}, 0
        return out

    def tags(self) -> Dict[str, str]:
        """The run's tags: the decode and its backend, and on a CPU a note on what its figures mean."""
        tags = {"wif.decode": "device", "wif.decode_backend": self.backend}
        if self.device.type != "cuda":
            tags[names.TAG_DECODE_NOTE] = (
                "data.decode=device on a CPU: each batch was decoded on the CPU in the main "
                "process; its figures mean nothing for the speed of decoding on a GPU"
            )
        return tags


def device_decode(cfg: DataConfig, device: torch.device, non_blocking: bool) -> Optional[DeviceDecode]:
    """The run's device decoder under data.decode=device; None under data.decode=host."""
    if cfg.decode.value != "device":
        return None
    return DeviceDecode(device, cfg.decode_backend, non_blocking)
