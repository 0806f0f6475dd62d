"""The generated study set (`data=synthetic`) and its JPEG-encoded twin (`data=encoded`), cached on disk.

Each is made once per parameter set, checksummed, and renamed into place when complete (NOTE [ A cache checked once ]).
"""

# NOTE [ A cache checked once ]
# Every job of a sweep loads the cache. Hashing the whole set each time cost the H100 node's jobs seconds:
# 737 MB read and SHA-256-checked for a run that uses a tenth of it. So the checksums are checked once, and
# VERIFIED records each file's size, times and inode as they were then. A later read whose files are unchanged
# skips the hashing; any write to a file changes its stamp, and the next read checks it again. As git's index
# does, a file written within RACY_S of the check is not stamped: a second write in the same clock tick would
# leave its times as they were. Bits that rot on disk with no write are not caught after the first check. The
# study's set is then mapped, not read: a run copies only the images its fraction uses. Both the check and the
# copy read the files, never the mapping: a mapping's pages count in the run's RSS and USS until it is closed,
# and touching a few maps their cached neighbours too. A run of a tenth of 117 MB logged a USS peak of 290 MB
# one time in three, 160 the others.

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from wif.config import DataConfig

log = logging.getLogger(__name__)
VERIFIED = "verified.json"  # each file's stamp when its checksum last matched. See NOTE [ A cache checked once ]
RACY_S = 2.0  # a file modified this recently is checked again next time
CHUNK = 4 << 20  # bytes hashed at a time


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


def _file_digest(path: Path) -> str:
    """`_digest` of the array saved at `path`, read from the file: a mapped array read whole would stay in the
    run's RSS and USS (NOTE [ A cache checked once ]). ValueError where the header is no plain .npy one."""
    headers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    sha, chunk = hashlib.sha256(), bytearray(CHUNK)
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version not in headers or headers[version](f)[1]:  # [1]: Fortran order, never written here
            raise ValueError(f"{path.name} is not a C-ordered .npy file of version 1 or 2")
        while size := f.readinto(chunk):
            sha.update(memoryview(chunk)[:size])
    return sha.hexdigest()


def rows_of(array: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """`array[indices]`, in memory; a mapped file's rows read from the file (NOTE [ A cache checked once ]).

    Indexing the mapping maps its neighbours too: 900 of 10,000 images brought all 117 MB into the run's USS.
    """
    if not isinstance(array, np.memmap) or array.filename is None:
        return array[indices]
    out = np.empty((len(indices), *array.shape[1:]), array.dtype)
    if not len(indices):
        return out
    row, flat = out[:1].nbytes, memoryview(out.reshape(-1).view(np.uint8))
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1  # runs of consecutive rows: one read each
    with open(array.filename, "rb") as f:
        for lo, hi in zip([0, *breaks], [*breaks, len(indices)]):
            f.seek(array.offset + int(indices[lo]) * row)
            if f.readinto(flat[lo * row : hi * row]) != (hi - lo) * row:
                raise ValueError(f"{Path(array.filename).name} is shorter than its header says")
    return out


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


def _read_cache(folder: Path, mmap: bool = False) -> Dict[str, np.ndarray]:
    """Load, mapped where `mmap`, and verify once; ValueError on anything missing, truncated or altered."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None) for name in manifest["sha256"]}
        stamp = _stamp(folder, list(manifest["sha256"]))
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"unreadable: {err}") from err
    if _read_stamp(folder) == stamp:
        return arrays
    for name in arrays:
        if _file_digest(folder / f"{name}.npy") != manifest["sha256"].get(name):
            raise ValueError(f"checksum mismatch in {name}.npy")
    _write_stamp(folder, stamp)
    return arrays


def _stamp(folder: Path, names: List[str]) -> Dict[str, List[int]]:
    """What any write to each file changes: its size, modification and change times, and inode."""
    stats = {name: (folder / f"{name}.npy").stat() for name in names}
    return {name: [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] for name, st in stats.items()}


def _read_stamp(folder: Path) -> Optional[Dict[str, List[int]]]:
    """The files' stamp when their checksums last matched; None where never, or unreadable."""
    try:
        return json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        return None


def _write_stamp(folder: Path, stamp: Dict[str, List[int]]) -> None:
    """Record that the checksums matched; a cache folder that cannot be written is checked every time."""
    if any(mtime_ns > time.time_ns() - RACY_S * 1e9 for _, mtime_ns, _, _ in stamp.values()):
        return  # written too recently to tell a later write in the same tick
    try:
        tmp = folder / f"{VERIFIED}.{os.getpid()}"
        tmp.write_text(json.dumps(stamp))
        os.replace(tmp, folder / VERIFIED)
    except OSError:
        pass


def _cached(cfg: DataConfig, kind: str, key: Dict[str, float], make, mmap: bool = False) -> Dict[str, np.ndarray]:
    """The cache entry for `key`, made on first use or when the cache is damaged; mapped where `mmap`."""
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cfg.cache_dir).expanduser() / f"{kind}-{tag}"
    if folder.exists():
        try:
            return _read_cache(folder, mmap)
        except ValueError as err:
            log.warning("Data cache %s is damaged (%s); regenerating it.", folder, err)
            shutil.rmtree(folder, ignore_errors=True)
    log.info("Generating the %s image set (%d train, %d test) into %s", kind, cfg.num_train, cfg.num_test, folder)
    arrays = make()
    _write_cache(folder, arrays, key)
    return arrays


def synthetic_arrays(cfg: DataConfig, mmap: bool = False) -> Dict[str, np.ndarray]:
    """The cached synthetic set for these parameters; mapped read-only where `mmap`, once cached."""
    return _cached(cfg, "synthetic", synthetic_key(cfg), lambda: generate_synthetic(cfg), mmap=mmap)


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
