"""Images read as training reads them: an ImageFolder root listed (`data=folder`), and image i of a set.

The held-out split is the first of `test/`, `val/` and `validation/` the root holds. The decoders (`Decoder`)
read image i from a blob of JPEG bytes, from files, or from RAM; each pickles into DataLoader workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Dict, List, Optional, Protocol, Tuple

import numpy as np

from wif.config import ConfigError, DataConfig

if TYPE_CHECKING:
    import torch

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
HELD_OUT = ("test", "val", "validation")  # the held-out split's folder, the first found
LAYOUT = "train/ and a held-out split (test/, val/ or validation/), each with one sub-folder per class"


def held_out(root: Path) -> str:
    """The name of the root's held-out split folder; ConfigError naming what is missing where there is none."""
    found = [name for name in HELD_OUT if (root / name).is_dir()]
    if not (root / "train").is_dir() or not found:
        missing = "train/" if not (root / "train").is_dir() else "held-out split (none of test/, val/, validation/)"
        raise ConfigError(f"data=folder: data.root={root} has no {missing}; it must hold {LAYOUT}.")
    return found[0]


def _class_folders(part: Path) -> List[Path]:
    if not part.is_dir():
        raise ConfigError(f"data=folder: {part} does not exist; data.root must hold {LAYOUT}.")
    classes = sorted(p for p in part.iterdir() if p.is_dir())
    if not classes:
        raise ConfigError(f"data=folder: {part} has no class sub-folders.")
    return classes


def read_image(path: Path, size: Optional[int]) -> torch.Tensor:
    """One image file as uint8 RGB at size x size (None: its own size), as training reads it; an unreadable
    one raises ConfigError naming it."""
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import resize

    try:
        img = decode_image(str(path), mode=ImageReadMode.RGB)
    except (RuntimeError, OSError, ValueError) as err:
        raise ConfigError(f"data=folder: cannot read image {path} ({err}). Remove or replace the file.") from err
    return img if size is None else resize(img, [size, size], antialias=True)


def _list_part(part: Path, class_names: List[str], skip: AbstractSet[str]) -> Tuple[List[str], np.ndarray]:
    paths, labels = [], []
    for label, name in enumerate(class_names):
        with os.scandir(part / name) as entries:  # plain strings: 50,000 Path objects would cost 0.3 s
            files = sorted(
                e.path for e in entries if os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES and e.path not in skip
            )
        if not files:
            raise ConfigError(
                f"data=folder: class folder {part / name} holds no {'readable ' if skip else ''}"
                f"images ({', '.join(IMAGE_SUFFIXES)}). Remove it or add images."
            )
        paths += files
        labels += [label] * len(files)
    return paths, np.asarray(labels, dtype=np.int64)


def folder_files(cfg: DataConfig, skip: AbstractSet[str] = frozenset()) -> Tuple[Dict[str, object], int]:
    """The train/ and held-out (as test_*) image paths and labels of an ImageFolder root, checked class by
    class, without the paths in `skip`."""
    root = Path(str(cfg.root)).expanduser()
    if not root.is_dir():
        raise ConfigError(f"data=folder: data.root={root} does not exist. Point it at a folder with {LAYOUT}.")
    test = held_out(root)
    names = [p.name for p in _class_folders(root / "train")]
    test_names = [p.name for p in _class_folders(root / test)]
    if test_names != names:
        raise ConfigError(f"data=folder: {test}/ classes {test_names} differ from train/ classes {names}.")
    out: Dict[str, object] = {"held_out": test}
    for part, folder in (("train", "train"), ("test", test)):
        out[f"{part}_paths"], out[f"{part}_y"] = _list_part(root / folder, names, skip)
    return out, len(names)


class Decoder(Protocol):
    """Image i of a set as uint8 C x H x W; a decoder of encoded images also gives its bytes (`encoded`)."""

    def __call__(self, i: int) -> torch.Tensor: ...


class JpegBlob:
    """An encoded set as one byte blob plus offsets: cheap to send to spawned workers."""

    def __init__(self, blob: torch.Tensor, offsets: torch.Tensor) -> None:
        self.blob, self.offsets = blob, offsets

    def __call__(self, i: int) -> torch.Tensor:
        from torchvision.io import decode_jpeg

        return decode_jpeg(self.encoded(i))

    def encoded(self, i: int) -> torch.Tensor:
        """Image i's JPEG bytes."""
        return self.blob[self.offsets[i] : self.offsets[i + 1]]


class ImageFiles:
    """Image files decoded and resized on access, as ImageFolder would; at their own size with `size=None`."""

    def __init__(self, paths: List[str], size: Optional[int]) -> None:
        self.paths, self.size = paths, size
        self.native = size is None

    def __call__(self, i: int) -> torch.Tensor:
        return read_image(Path(self.paths[i]), self.size)

    def encoded(self, i: int) -> torch.Tensor:
        """Image i's file bytes."""
        from torchvision.io import read_file

        return read_file(self.paths[i])


class HeldImages:
    """Images already decoded (uint8) and held in RAM."""

    def __init__(self, images: torch.Tensor) -> None:
        self.images = images

    def __call__(self, i: int) -> torch.Tensor:
        return self.images[i]
