"""The generated study set (`data=synthetic`) and its JPEG-encoded twin (`data=encoded`), made once per
parameter set and cached on disk, checksummed, written to a temporary folder and renamed when complete."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

from wif.config import DataConfig

log = logging.getLogger(__name__)


def synthetic_key(cfg: DataConfig) -> Dict[str, float]:
    """What the generated set depends on: the key of its cache entry, and of those made from it."""
    return {
        "num_train": cfg.num_train,
        "num_test": cfg.num_test,
        "image_size": cfg.image_size,
        "num_classes": cfg.num_classes,
        "seed": cfg.synthetic_seed,
        "noise": cfg.noise,
        "version": 2,
    }


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
            y = labels[lo : lo + 4096]
            contrast = 0.6 + 0.8 * torch.rand(len(y), 1, 1, 1, generator=g)
            x = 0.5 + (patterns[y] - 0.5) * contrast + cfg.noise * torch.randn(len(y), 3, size, size, generator=g)
            images[lo : lo + len(y)] = x.clamp_(0, 1).mul_(255).round_().to(torch.uint8).numpy()
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
    return _cached(cfg, "synthetic", synthetic_key(cfg), lambda: generate_synthetic(cfg))


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

    return _cached(cfg, "encoded", {**synthetic_key(cfg), "jpeg_quality": cfg.jpeg_quality}, make)
