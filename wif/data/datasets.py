"""The study's datasets and splits, at two operating points.

Preprocessed tensors: `data=synthetic`, or `data=folder data.preload=true` without augmentation. They are
float32 in host memory, so the loader options differ only in how batches reach the device.

Decoded per sample: `data=encoded`, `data=folder`. Images are decoded, augmented and normalized in
`__getitem__`, in the DataLoader's workers when there are any, as most training does.

Under transfer.uint8=true both yield uint8 images; the float conversion and normalization run on the device
(`wif.data.transfer.to_float`). The fraction takes a seeded subset before the train/validation split, the same
for every source. The sources live in `wif.data.synthetic` and `wif.data.folder`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from wif.config import Augment, ConfigError, DataConfig, DataSource
from wif.data.folder import Decoder, HeldImages, ImageFiles, JpegBlob, folder_files, read_image
from wif.data.folder_check import unreadable
from wif.data.synthetic import encoded_arrays, rows_of, synthetic_arrays

# Images are scaled to [0, 1] and then centred like this on every channel.
NORMALIZE_MEAN, NORMALIZE_STD = 0.5, 0.25


@dataclass
class Split:
    """A split held as tensors."""

    images: torch.Tensor  # float32, N x 3 x H x W, normalized (uint8 as decoded under transfer.uint8=true)
    labels: torch.Tensor  # int64, N

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nbytes(self) -> int:
        """The bytes its images and labels take."""
        return self.images.element_size() * self.images.nelement() + self.labels.element_size() * len(self)


def make_transform(augment: Augment, size: int, train: bool, native: bool = False, uint8: bool = False):
    """uint8 image to normalized float; random augmentation on the training split only.

    Args:
        augment: data.augment.
        size: the image size a batch holds.
        train: the training split, the one augmented.
        native: images at their own size, evaluated on Resize(size * 256/224) + CenterCrop(size), as PyTorch's
            ImageNet example does.
        uint8: the same steps without the float conversion and normalization: the device does them.
    """
    from torchvision.transforms import v2

    steps = []
    if train and augment is Augment.standard:
        steps.append(v2.RandomResizedCrop(size, antialias=True))
    elif native:
        steps += [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
    if train and augment in (Augment.flip, Augment.standard):
        steps.append(v2.RandomHorizontalFlip())
    if not uint8:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize([NORMALIZE_MEAN] * 3, [NORMALIZE_STD] * 3)]
    return v2.Compose(steps) if steps else v2.Identity()  # uint8, nothing to crop: the decoded image as it is


class PerSample(Dataset):
    """A split read sample by sample from `self.decoder`, a batch at a time; the decoder may let go after each batch."""

    decoder: Decoder

    def __getitems__(self, indices: List[int]) -> list:
        batch = [self[i] for i in indices]
        after = getattr(self.decoder, "after_batch", None)
        if after is not None:
            after()
        return batch


class DecodedSplit(PerSample):
    """A split whose images are decoded (and augmented) in `__getitem__`: per-sample work for the loader."""

    def __init__(self, decoder: Decoder, labels: torch.Tensor, indices: np.ndarray, transform) -> None:
        self.decoder, self.labels, self.indices, self.transform = decoder, labels, indices, transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        j = int(self.indices[i])
        return self.transform(self.decoder(j)), self.labels[j]

    def materialize(self, size: int) -> Split:
        """Decode every image once, without augmentation: for holding the set on the device."""
        plain = make_transform(Augment.none, size, train=False, native=getattr(self.decoder, "native", False))
        images = torch.stack([plain(self.decoder(int(j))) for j in self.indices])
        return Split(images, self.labels[torch.from_numpy(np.asarray(self.indices))])


AnySplit = Union[Split, DecodedSplit]


@dataclass
class Datasets:
    """A set's train, validation and test splits."""

    train: AnySplit
    val: AnySplit
    test: AnySplit
    num_classes: int


def _usable_files(cfg: DataConfig) -> Tuple[Dict[str, object], int]:
    """folder_files, without the unreadable files under data.skip_bad=true: wif.data.folder_check found them."""
    return folder_files(cfg, unreadable(cfg) if cfg.skip_bad else frozenset())


def folder_arrays(cfg: DataConfig) -> Tuple[Dict[str, np.ndarray], int]:
    """An ImageFolder decoded once into uint8 arrays: data.preload=true."""
    files, n_classes = _usable_files(cfg)
    arrays: Dict[str, np.ndarray] = {}
    for part in ("train", "test"):
        arrays[f"{part}_x"] = np.stack([read_image(Path(p), cfg.image_size).numpy() for p in files[f"{part}_paths"]])
        arrays[f"{part}_y"] = files[f"{part}_y"]
    return arrays, n_classes


def split_indices(n_total: int, fraction: float, val_split: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """A seeded subset of `fraction` of the training set, then its train/validation split.

    Args:
        n_total: the training set's images.
        fraction: data.fraction.
        val_split: the subset's share held out for validation.
        seed: the subset's seed.
    """
    g = torch.Generator().manual_seed(seed)
    subset = torch.randperm(n_total, generator=g)[: round(n_total * fraction)].numpy()
    n_val = round(len(subset) * val_split)
    return np.sort(subset[n_val:]), np.sort(subset[:n_val])


def evaluated(indices: np.ndarray, limit: Optional[int]) -> np.ndarray:
    """At most `limit` of an evaluated split's indices, evenly spaced through it (data.val_images, test_images)."""
    if limit is None or limit >= len(indices):
        return indices
    return indices[np.linspace(0, len(indices) - 1, num=limit).round().astype(np.int64)]


def _in_memory(array: np.ndarray) -> np.ndarray:
    """The array in this process's memory: a mapped file is copied, never held by a tensor."""
    return np.array(array) if isinstance(array, np.memmap) else array


def _to_split(images_u8: np.ndarray, labels: np.ndarray, uint8: bool = False) -> Split:
    """Held images as the loader hands them out: normalized float32, or the uint8 images themselves."""
    x = torch.from_numpy(np.ascontiguousarray(images_u8))
    if not uint8:
        x = x.to(torch.float32).div_(255.0).sub_(NORMALIZE_MEAN).div_(NORMALIZE_STD)
    return Split(x, torch.from_numpy(np.ascontiguousarray(labels)))


def _decoded(cfg: DataConfig, decoder: Decoder, labels: np.ndarray, pick: Pick, uint8: bool = False) -> DecodedSplit:
    """The split `pick` takes, decoded per sample by `decoder`; the training split augmented.

    Args:
        cfg: the data options: augmentation and image size.
        decoder: the part's decoder.
        labels: the part's labels.
        pick: the split's images.
        uint8: images stay uint8, for the device to convert and normalize.
    """
    native = getattr(decoder, "native", False)
    transform = make_transform(cfg.augment, cfg.image_size, pick.train, native=native, uint8=uint8)
    return DecodedSplit(decoder, labels=torch.from_numpy(labels), indices=pick.indices, transform=transform)


def load_datasets(cfg: DataConfig, uint8: bool = False) -> Datasets:
    """Train, validation and test splits: tensors in host memory, or images decoded per sample; uint8 with `uint8`."""
    if cfg.source is DataSource.encoded:
        arrays, num_classes = encoded_arrays(cfg), cfg.num_classes
        decoders = {
            p: JpegBlob(torch.from_numpy(arrays[f"{p}_blob"]), torch.from_numpy(arrays[f"{p}_offsets"]))
            for p in ("train", "test")
        }
    elif cfg.source is DataSource.folder and not cfg.preload:
        arrays, num_classes = _usable_files(cfg)
        size = None if cfg.augment is Augment.standard else cfg.image_size  # standard: crops from the full image
        decoders = {p: ImageFiles(arrays[f"{p}_paths"], size) for p in ("train", "test")}
    else:
        if cfg.source is DataSource.synthetic:  # mapped: only the images the fraction uses are read
            arrays, num_classes = synthetic_arrays(cfg, mmap=cfg.augment is Augment.none), cfg.num_classes
        else:
            arrays, num_classes = folder_arrays(cfg)
        decoders = (
            None
            if cfg.augment is Augment.none
            else {p: HeldImages(torch.from_numpy(arrays[f"{p}_x"])) for p in ("train", "test")}
        )
    labels = {"train": _in_memory(arrays["train_y"]), "test": _in_memory(arrays["test_y"])}
    if decoders is not None:
        return decoded_datasets(cfg=cfg, decoders=decoders, labels=labels, num_classes=num_classes, uint8=uint8)
    picks = split_picks(cfg, len(labels["train"]), len(labels["test"]))
    splits = {  # a mapped file's images are read into memory here
        name: _to_split(rows_of(arrays[f"{p.part}_x"], p.indices), labels[p.part][p.indices], uint8)
        for name, p in picks.items()
    }
    return Datasets(**splits, num_classes=num_classes)


class Pick(NamedTuple):
    """The images a split takes: a part of the set, their indices there, and whether it is the training split."""

    part: str  # "train" or "test"
    indices: np.ndarray
    train: bool


def split_picks(cfg: DataConfig, n_train: int, n_test: int) -> Dict[str, Pick]:
    """The train, validation and test splits' images: `split_indices`' subset, and the test part.

    A fraction that leaves no training image is refused. Validation and test keep at most data.val_images and
    data.test_images (`evaluated`).
    """
    train_idx, val_idx = split_indices(n_train, fraction=cfg.fraction, val_split=cfg.val_split, seed=cfg.seed)
    if len(train_idx) == 0:
        raise ConfigError(
            f"data.fraction={cfg.fraction} of {n_train} training images leaves an "
            "empty training split. Raise data.fraction."
        )
    return {
        "train": Pick(part="train", indices=train_idx, train=True),
        "val": Pick(part="train", indices=evaluated(val_idx, cfg.val_images), train=False),
        "test": Pick(part="test", indices=evaluated(np.arange(n_test), cfg.test_images), train=False),
    }


def decoded_datasets(
    cfg: DataConfig,
    decoders: Dict[str, Decoder],
    labels: Dict[str, np.ndarray],
    num_classes: int,
    uint8: bool = False,
) -> Datasets:
    """The three splits of a set decoded per sample, from each part's decoder and labels.

    Args:
        cfg: the data options: fraction, validation split, augmentation, image size.
        decoders: each part's decoder, by part ("train", "test").
        labels: each part's labels, by part.
        num_classes: the set's classes.
        uint8: images stay uint8, for the device to convert and normalize (transfer.uint8=true).
    """
    picks = split_picks(cfg, len(labels["train"]), len(labels["test"]))
    splits = {
        name: _decoded(cfg, decoder=decoders[pick.part], labels=labels[pick.part], pick=pick, uint8=uint8)
        for name, pick in picks.items()
    }
    return Datasets(**splits, num_classes=num_classes)
