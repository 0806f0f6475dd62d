"""Small image folders written for a test, and the data config that reads them (tests/test_data.py,
tests/test_formats.py, tests/test_folder_check.py, tests/test_exit_codes.py, ...)."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from tests.conftest import compose_cfg


def data_cfg(cache: Path, *overrides: str):
    return OmegaConf.to_object(compose_cfg("preset=smoke", f"data.cache_dir={cache}", *overrides)).data


def image_folder(root: Path, bad: bool = False, empty_class: bool = False) -> Path:
    from torchvision.io import write_png

    for part in ("train", "test"):
        for c, colour in enumerate((0, 255)):
            d = root / part / f"class{c}"
            d.mkdir(parents=True)
            if empty_class and part == "train" and c == 1:
                continue
            for i in range(4):
                write_png(torch.full((3, 20, 30), colour, dtype=torch.uint8), str(d / f"{i}.png"))
    if bad:
        (root / "train" / "class0" / "broken.png").write_bytes(b"not an image")
    return root


def jpeg_folder(root: Path, per_class: int = 16, test_per_class: int = 4, size: int = 32, classes: int = 3) -> Path:
    """An ImageFolder of small noisy JPEGs, each class its own brightness (learnable in a few epochs)."""
    from torchvision.io import encode_jpeg

    g = torch.Generator().manual_seed(0)
    for part, n in (("train", per_class), ("test", test_per_class)):
        for c in range(classes):
            d = root / part / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n):
                img = (torch.rand(3, size, size, generator=g) * 60 + 40 + c * 60).to(torch.uint8)
                (d / f"{i:03d}.jpg").write_bytes(encode_jpeg(img, quality=90).numpy().tobytes())
    return root
