"""The study's images, at two operating points.

- Preprocessed tensors (`data=synthetic`, or `data=folder data.preload=true` without augmentation): float32
  tensors in host memory, the way the study holds its images, so the loader options differ only in how
  batches reach the device. The subset is cut from the uint8 images, so only the images a run uses are
  ever converted to float.
- Decoded per sample (`data=encoded`, `data=folder`): JPEG bytes or image files decoded, augmented and
  normalized in `__getitem__`, in the DataLoader's workers when there are any, as most training does.
The fraction takes a seeded subset of the training set before the train/validation split; every source
splits the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Dict, List, Protocol, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from wif.config import Augment, ConfigError, DataConfig, DataSource

log = logging.getLogger(__name__)

# Images are scaled to [0, 1] and then centred like this on every channel.
NORMALIZE_MEAN, NORMALIZE_STD = 0.5, 0.25
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")


@dataclass
class Split:
    images: torch.Tensor  # float32, N x 3 x H x W, normalized
    labels: torch.Tensor  # int64, N

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nbytes(self) -> int:
        return self.images.element_size() * self.images.nelement() + self.labels.element_size() * len(self)


class Decoder(Protocol):
    """Image i of a set as uint8 C x H x W. Implementations are plain classes: they pickle into workers."""

    def __call__(self, i: int) -> torch.Tensor: ...


class JpegBlob:
    """An encoded set as one byte blob plus offsets: cheap to send to spawned workers."""

    def __init__(self, blob: torch.Tensor, offsets: torch.Tensor) -> None:
        self.blob, self.offsets = blob, offsets

    def __call__(self, i: int) -> torch.Tensor:
        from torchvision.io import decode_jpeg

        return decode_jpeg(self.blob[self.offsets[i]:self.offsets[i + 1]])


class ImageFiles:
    """Image files decoded and resized on access, as torchvision's ImageFolder would."""

    def __init__(self, paths: List[str], size: int) -> None:
        self.paths, self.size = paths, size

    def __call__(self, i: int) -> torch.Tensor:
        return _read_image(Path(self.paths[i]), self.size)


class HeldImages:
    """Images already decoded (uint8) and held in RAM."""

    def __init__(self, images: torch.Tensor) -> None:
        self.images = images

    def __call__(self, i: int) -> torch.Tensor:
        return self.images[i]


def make_transform(augment: Augment, size: int, train: bool):
    """uint8 image to normalized float; random augmentation on the training split only."""
    from torchvision.transforms import v2

    steps = []
    if train and augment is Augment.standard:
        steps.append(v2.RandomResizedCrop(size, antialias=True))
    if train and augment in (Augment.flip, Augment.standard):
        steps.append(v2.RandomHorizontalFlip())
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize([NORMALIZE_MEAN] * 3, [NORMALIZE_STD] * 3)]
    return v2.Compose(steps)


class DecodedSplit(Dataset):
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
        plain = make_transform(Augment.none, size, train=False)
        images = torch.stack([plain(self.decoder(int(j))) for j in self.indices])
        return Split(images, self.labels[torch.from_numpy(np.asarray(self.indices))])


AnySplit = Union[Split, DecodedSplit]


@dataclass
class Datasets:
    train: AnySplit
    val: AnySplit
    test: AnySplit
    num_classes: int


# ----------------------------------------------------------------------------- synthetic images
def _synthetic_key(cfg: DataConfig) -> Dict[str, float]:
    return {"num_train": cfg.num_train, "num_test": cfg.num_test, "image_size": cfg.image_size,
            "num_classes": cfg.num_classes, "seed": cfg.synthetic_seed, "noise": cfg.noise, "version": 2}


def generate_synthetic(cfg: DataConfig) -> Dict[str, np.ndarray]:
    """A learnable set: each class is a smooth colour pattern; each image is its pattern at its own
    contrast, plus pixel noise."""
    g = torch.Generator().manual_seed(cfg.synthetic_seed)
    size, n_cls = cfg.image_size, cfg.num_classes
    coarse = torch.rand(n_cls, 3, 6, 6, generator=g)
    patterns = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)
    out: Dict[str, np.ndarray] = {}
    for part, n in (("train", cfg.num_train), ("test", cfg.num_test)):
        labels = torch.randint(0, n_cls, (n,), generator=g)
        images = np.empty((n, 3, size, size), dtype=np.uint8)
        for lo in range(0, n, 4096):  # in chunks: never a float copy of the whole set
            y = labels[lo:lo + 4096]
            contrast = 0.6 + 0.8 * torch.rand(len(y), 1, 1, 1, generator=g)
            x = 0.5 + (patterns[y] - 0.5) * contrast + cfg.noise * torch.randn(len(y), 3, size, size, generator=g)
            images[lo:lo + len(y)] = x.clamp_(0, 1).mul_(255).round_().to(torch.uint8).numpy()
        out[f"{part}_x"], out[f"{part}_y"] = images, labels.numpy().astype(np.int64)
    return out


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def _write_cache(folder: Path, arrays: Dict[str, np.ndarray], key: Dict[str, float]) -> None:
    """Write into a temporary folder, then rename: readers never see a half-written cache."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
    for name, arr in arrays.items():
        np.save(tmp / f"{name}.npy", arr)
    manifest = {"key": key, "sha256": {name: _digest(arr) for name, arr in arrays.items()}}
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    try:
        os.rename(tmp, folder)
    except OSError:  # another process finished first: theirs is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cache(folder: Path) -> Dict[str, np.ndarray]:
    """Load and verify; raises ValueError on anything missing, truncated or altered."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy") for name in manifest["sha256"]}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"unreadable: {err}") from err
    for name, arr in arrays.items():
        if _digest(arr) != manifest["sha256"].get(name):
            raise ValueError(f"checksum mismatch in {name}.npy")
    return arrays


def _cached(cfg: DataConfig, kind: str, key: Dict[str, float], make) -> Dict[str, np.ndarray]:
    """The cache entry for `key`, made on first use or when the cache is damaged."""
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cfg.cache_dir).expanduser() / f"{kind}-{tag}"
    if folder.exists():
        try:
            return _read_cache(folder)
        except ValueError as err:
            log.warning("Data cache %s is damaged (%s); regenerating it.", folder, err)
            shutil.rmtree(folder, ignore_errors=True)
    log.info("Generating the %s image set (%d train, %d test) into %s", kind, cfg.num_train, cfg.num_test, folder)
    arrays = make()
    _write_cache(folder, arrays, key)
    return arrays


def synthetic_arrays(cfg: DataConfig) -> Dict[str, np.ndarray]:
    """The cached synthetic set for these parameters."""
    return _cached(cfg, "synthetic", _synthetic_key(cfg), lambda: generate_synthetic(cfg))


def _encode(images: np.ndarray, quality: int) -> Tuple[np.ndarray, np.ndarray]:
    from torchvision.io import encode_jpeg

    chunks = [encode_jpeg(torch.from_numpy(img), quality=quality).numpy() for img in images]
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in chunks])
    return np.concatenate(chunks) if chunks else np.zeros(0, np.uint8), offsets


def encoded_arrays(cfg: DataConfig) -> Dict[str, np.ndarray]:
    """The synthetic set as JPEG bytes: the same images, stored the way most datasets are."""

    def make() -> Dict[str, np.ndarray]:
        raw = synthetic_arrays(cfg)
        out = {}
        for part in ("train", "test"):
            out[f"{part}_blob"], out[f"{part}_offsets"] = _encode(raw[f"{part}_x"], cfg.jpeg_quality)
            out[f"{part}_y"] = raw[f"{part}_y"]
        return out

    return _cached(cfg, "encoded", {**_synthetic_key(cfg), "jpeg_quality": cfg.jpeg_quality}, make)


# ----------------------------------------------------------------------------- image folders
def _class_folders(part: Path) -> List[Path]:
    if not part.is_dir():
        raise ConfigError(f"data=folder: {part} does not exist; data.root must hold train/ and test/, "
                          "each with one sub-folder per class.")
    classes = sorted(p for p in part.iterdir() if p.is_dir())
    if not classes:
        raise ConfigError(f"data=folder: {part} has no class sub-folders.")
    return classes


def _read_image(path: Path, size: int) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import resize

    try:
        img = decode_image(str(path), mode=ImageReadMode.RGB)
    except (RuntimeError, OSError, ValueError) as err:
        raise ConfigError(f"data=folder: cannot read image {path} ({err}). Remove or replace the file.") from err
    return resize(img, [size, size], antialias=True)


def _list_part(part: Path, class_names: List[str], skip: AbstractSet[str]) -> Tuple[List[str], np.ndarray]:
    paths, labels = [], []
    for label, name in enumerate(class_names):
        with os.scandir(part / name) as entries:  # plain strings: 50,000 Path objects would cost 0.3 s
            files = sorted(e.path for e in entries
                           if os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES and e.path not in skip)
        if not files:
            raise ConfigError(f"data=folder: class folder {part / name} holds no {'readable ' if skip else ''}"
                              f"images ({', '.join(IMAGE_SUFFIXES)}). Remove it or add images.")
        paths += files
        labels += [label] * len(files)
    return paths, np.asarray(labels, dtype=np.int64)


def folder_files(cfg: DataConfig, skip: AbstractSet[str] = frozenset()) -> Tuple[Dict[str, object], int]:
    """The train/ and test/ image paths and labels of an ImageFolder root, checked class by class, without
    the paths in `skip`."""
    root = Path(str(cfg.root)).expanduser()
    if not root.is_dir():
        raise ConfigError(f"data=folder: data.root={root} does not exist. Point it at a folder with train/ and test/.")
    names = [p.name for p in _class_folders(root / "train")]
    test_names = [p.name for p in _class_folders(root / "test")]
    if test_names != names:
        raise ConfigError(f"data=folder: test/ classes {test_names} differ from train/ classes {names}.")
    out: Dict[str, object] = {}
    for part in ("train", "test"):
        out[f"{part}_paths"], out[f"{part}_y"] = _list_part(root / part, names, skip)
    return out, len(names)


def _usable_files(cfg: DataConfig) -> Tuple[Dict[str, object], int]:
    """folder_files without the unreadable files when data.skip_bad=true (wif.folder_check found them)."""
    if not cfg.skip_bad:
        return folder_files(cfg)
    from wif.folder_check import unreadable

    return folder_files(cfg, unreadable(cfg))


def folder_arrays(cfg: DataConfig) -> Tuple[Dict[str, np.ndarray], int]:
    """An ImageFolder decoded once into uint8 arrays (data.preload=true)."""
    files, n_classes = _usable_files(cfg)
    arrays: Dict[str, np.ndarray] = {}
    for part in ("train", "test"):
        arrays[f"{part}_x"] = np.stack([_read_image(Path(p), cfg.image_size).numpy() for p in files[f"{part}_paths"]])
        arrays[f"{part}_y"] = files[f"{part}_y"]
    return arrays, n_classes


# ----------------------------------------------------------------------------- subsets and splits
def split_indices(n_total: int, fraction: float, val_split: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """A seeded subset of `fraction` of the training set, then its train/validation split."""
    g = torch.Generator().manual_seed(seed)
    subset = torch.randperm(n_total, generator=g)[: round(n_total * fraction)].numpy()
    n_val = round(len(subset) * val_split)
    return np.sort(subset[n_val:]), np.sort(subset[:n_val])


def _to_split(images_u8: np.ndarray, labels: np.ndarray) -> Split:
    x = torch.from_numpy(images_u8).to(torch.float32)
    x.div_(255.0).sub_(NORMALIZE_MEAN).div_(NORMALIZE_STD)
    return Split(x, torch.from_numpy(np.ascontiguousarray(labels)))


def _decoded(decoder: Decoder, labels: np.ndarray, idx: np.ndarray, cfg: DataConfig, train: bool) -> DecodedSplit:
    return DecodedSplit(decoder, torch.from_numpy(labels), idx, make_transform(cfg.augment, cfg.image_size, train))


def load_datasets(cfg: DataConfig) -> Datasets:
    """Train, validation and test splits: tensors in host memory, or images decoded per sample."""
    if cfg.source is DataSource.encoded:
        arrays, num_classes = encoded_arrays(cfg), cfg.num_classes
        decoders = {p: JpegBlob(torch.from_numpy(arrays[f"{p}_blob"]), torch.from_numpy(arrays[f"{p}_offsets"]))
                    for p in ("train", "test")}
    elif cfg.source is DataSource.folder and not cfg.preload:
        arrays, num_classes = _usable_files(cfg)
        decoders = {p: ImageFiles(arrays[f"{p}_paths"], cfg.image_size) for p in ("train", "test")}
    else:
        if cfg.source is DataSource.synthetic:
            arrays, num_classes = synthetic_arrays(cfg), cfg.num_classes
        else:
            arrays, num_classes = folder_arrays(cfg)
        decoders = None if cfg.augment is Augment.none else {
            p: HeldImages(torch.from_numpy(arrays[f"{p}_x"])) for p in ("train", "test")}
    n_total = len(arrays["train_y"])
    train_idx, val_idx = split_indices(n_total, cfg.fraction, cfg.val_split, cfg.seed)
    if len(train_idx) == 0:
        raise ConfigError(f"data.fraction={cfg.fraction} of {n_total} training images leaves an "
                          "empty training split. Raise data.fraction.")
    y, test_y = arrays["train_y"], arrays["test_y"]
    if decoders is not None:
        return Datasets(train=_decoded(decoders["train"], y, train_idx, cfg, train=True),
                        val=_decoded(decoders["train"], y, val_idx, cfg, train=False),
                        test=_decoded(decoders["test"], test_y, np.arange(len(test_y)), cfg, train=False),
                        num_classes=num_classes)
    x = arrays["train_x"]
    return Datasets(train=_to_split(x[train_idx], y[train_idx]), val=_to_split(x[val_idx], y[val_idx]),
                    test=_to_split(arrays["test_x"], test_y), num_classes=num_classes)
