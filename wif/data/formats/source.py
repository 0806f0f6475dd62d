"""What a pack is made from: the source's files part by part, and the digest of that listing.

`data=folder` lists its files as they are (`wif.data.formats.store.listing_of`). `data=encoded` writes its
images once as JPEG files into the cache. The listing's digest names its packs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np

from wif.config import DataConfig
from wif.data.synthetic import encoded_arrays, synthetic_key

PARTS = ("train", "test")


@dataclass
class Listing:
    """Each part's image files in the source's order, their labels, and the number of classes."""

    paths: Dict[str, List[str]]
    labels: Dict[str, np.ndarray]
    num_classes: int
    where: str  # for messages: the folder the files came from

    def digest(self) -> str:
        """Names, sizes, mtimes and labels of every file: a changed, added or removed file changes it."""
        h = hashlib.sha256()
        for part in PARTS:
            for path, label in zip(self.paths[part], self.labels[part]):
                st = os.stat(path)
                h.update(f"{part}\0{path}\0{st.st_size}\0{st.st_mtime_ns}\0{int(label)}\n".encode())
        return h.hexdigest()

    def all_paths(self) -> List[str]:
        return [p for part in PARTS for p in self.paths[part]]


def encoded_files(cfg: DataConfig) -> Listing:
    """data=encoded's JPEG bytes as files, `part/<label>/<index>.jpg`, written once into the cache, in its order."""
    arrays = encoded_arrays(cfg)
    key = {**synthetic_key(cfg), "jpeg_quality": cfg.jpeg_quality, "version": 1}  # the files' own version
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cfg.cache_dir).expanduser() / f"encoded-files-{tag}"
    paths = {p: [str(root / p / str(int(y)) / f"{i:08d}.jpg") for i, y in enumerate(arrays[f"{p}_y"])] for p in PARTS}
    if not (root / "done").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=root.name + ".tmp-", dir=root.parent))
        for p in PARTS:
            blob, offsets = arrays[f"{p}_blob"], arrays[f"{p}_offsets"]
            for c in range(cfg.num_classes):
                (tmp / p / str(c)).mkdir(parents=True, exist_ok=True)
            for i, path in enumerate(paths[p]):
                Path(tmp, os.path.relpath(path, root)).write_bytes(blob[offsets[i] : offsets[i + 1]].tobytes())
        (tmp / "done").write_text(json.dumps(key))
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    return Listing(paths, {p: arrays[f"{p}_y"] for p in PARTS}, cfg.num_classes, str(root))
