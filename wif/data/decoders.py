"""Image i of a set, as uint8 C x H x W: from one blob of JPEG bytes, from image files, or from RAM.

Each decoder is a plain class: it pickles into DataLoader workers. `wif.data.datasets` reads its splits through
them; those of encoded images also give image i's bytes as stored, for data.decode=device.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Protocol

import torch

from wif.data.folder import read_image


class Decoder(Protocol):
    """Image i of a set as uint8 C x H x W.

    Implementations are plain classes: they pickle into workers. Those of encoded images also give image i's
    bytes as stored (`encoded`), for data.decode=device.
    """

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
    """Image files decoded and resized on access, as torchvision's ImageFolder would.

    With `size=None`, under data.augment=standard, they stay at their own size: the transform crops them as
    PyTorch's ImageNet example does.
    """

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
