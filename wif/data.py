"""The study's images: a synthetic set generated once and cached, or the user's ImageFolder.

Both end as float32 tensors held in host memory, the way the study holds its preprocessed images, so the
loader options differ only in how batches reach the device. The fraction takes a seeded subset of the
training set before the train/validation split; the subset is cut from the uint8 images so that only
the images a run uses are ever converted to float.
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
from typing import Dict, List, Tuple

import numpy as np
import torch

from wif.config import ConfigError, DataConfig, DataSource

log = logging.getLogger(__name__)

# Images are scaled to [0, 1] and then centred like this on every channel.
NORMALIZE_MEAN, NORMALIZE_STD = 0.5, 0.25
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
_ARRAYS = ("train_x", "train_y", "test_x", "test_y")


@dataclass
class Split:
    images: torch.Tensor  # float32, N x 3 x H x W, normalized
    labels: torch.Tensor  # int64, N

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nbytes(self) -> int:
        return self.images.element_size() * self.images.nelement() + self.labels.element_size() * len(self)


@dataclass
class Datasets:
    train: Split
    val: Split
    test: Split
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
        arrays = {name: np.load(folder / f"{name}.npy") for name in _ARRAYS}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"unreadable: {err}") from err
    for name, arr in arrays.items():
        if _digest(arr) != manifest["sha256"].get(name):
            raise ValueError(f"checksum mismatch in {name}.npy")
    return arrays


def synthetic_arrays(cfg: DataConfig) -> Dict[str, np.ndarray]:
    """The cached synthetic set for these parameters, generated on first use or when the cache is damaged."""
    key = _synthetic_key(cfg)
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cfg.cache_dir).expanduser() / f"synthetic-{tag}"
    if folder.exists():
        try:
            return _read_cache(folder)
        except ValueError as err:
            log.warning("Synthetic data cache %s is damaged (%s); regenerating it.", folder, err)
            shutil.rmtree(folder, ignore_errors=True)
    log.info("Generating the synthetic image set (%d train, %d test) into %s", cfg.num_train, cfg.num_test, folder)
    arrays = generate_synthetic(cfg)
    _write_cache(folder, arrays, key)
    return arrays


# ----------------------------------------------------------------------------- image folders
def _class_folders(part: Path) -> List[Path]:
    if not part.is_dir():
        raise ConfigError(f"data=folder: {part} does not exist; data.root must hold train/ and test/, "
                          "each with one sub-folder per class.")
    classes = sorted(p for p in part.iterdir() if p.is_dir())
    if not classes:
        raise ConfigError(f"data=folder: {part} has no class sub-folders.")
    return classes


def _decode_folder(part: Path, class_names: List[str], size: int) -> Tuple[np.ndarray, np.ndarray]:
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import resize

    images, labels = [], []
    for label, name in enumerate(class_names):
        files = sorted(f for f in (part / name).iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ConfigError(f"data=folder: class folder {part / name} holds no images "
                              f"({', '.join(IMAGE_SUFFIXES)}). Remove it or add images.")
        for f in files:
            try:
                img = decode_image(str(f), mode=ImageReadMode.RGB)
            except (RuntimeError, OSError, ValueError) as err:
                raise ConfigError(f"data=folder: cannot read image {f} ({err}). Remove or replace the file.") from err
            images.append(resize(img, [size, size], antialias=True).numpy())
            labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def folder_arrays(cfg: DataConfig) -> Tuple[Dict[str, np.ndarray], int]:
    root = Path(str(cfg.root)).expanduser()
    if not root.is_dir():
        raise ConfigError(f"data=folder: data.root={root} does not exist. Point it at a folder with train/ and test/.")
    names = [p.name for p in _class_folders(root / "train")]
    test_names = [p.name for p in _class_folders(root / "test")]
    if test_names != names:
        raise ConfigError(f"data=folder: test/ classes {test_names} differ from train/ classes {names}.")
    train_x, train_y = _decode_folder(root / "train", names, cfg.image_size)
    test_x, test_y = _decode_folder(root / "test", names, cfg.image_size)
    return {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}, len(names)


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


def load_datasets(cfg: DataConfig) -> Datasets:
    """Train, validation and test splits as normalized float tensors in host memory."""
    if cfg.source is DataSource.synthetic:
        arrays, num_classes = synthetic_arrays(cfg), cfg.num_classes
    else:
        arrays, num_classes = folder_arrays(cfg)
    train_idx, val_idx = split_indices(len(arrays["train_y"]), cfg.fraction, cfg.val_split, cfg.seed)
    if len(train_idx) == 0:
        raise ConfigError(f"data.fraction={cfg.fraction} of {len(arrays['train_y'])} training images leaves an "
                          "empty training split. Raise data.fraction.")
    x, y = arrays["train_x"], arrays["train_y"]
    return Datasets(train=_to_split(x[train_idx], y[train_idx]), val=_to_split(x[val_idx], y[val_idx]),
                    test=_to_split(arrays["test_x"], arrays["test_y"]), num_classes=num_classes)
