"""The smoke config on a cache of its own (`smoke_conf`), a pass of a split decoded on the host or on the device, and
two passes compared image by image (tests/test_decode.py, tests/test_decode_gpu.py, tests/test_study.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch

from tests.conftest import compose_cfg, needs
from wif.config import Config
from wif.config.targets import typed
from wif.data.loaders import Batch, Reading, build_batches

CPU = torch.device("cpu")
BACKEND_CASES = [pytest.param("torchcodec", marks=needs("torchcodec")), "torchvision"]  # torchcodec: an extra


def smoke_conf(cache_dir: Path, *overrides: str) -> Config:
    return typed(compose_cfg("preset=smoke", f"data.cache_dir={cache_dir}", *overrides))


def epoch_batches(conf: Config, split, transfer, train: bool, seed: int = 7) -> List[Batch]:
    """Every batch of one pass after the transfer; the loader and the augmentation seeded the same each pass."""
    torch.manual_seed(seed)
    loader = build_batches(split, conf.loader, Reading(batch_size=conf.data.batch_size, train=train, seed=0))
    return [transfer(b) for b in loader]


def compare_passes(host: List[Batch], device: List[Batch]) -> float:
    """The mean absolute difference of two passes' images, after checking their counts and labels agree."""
    assert len(host) == len(device) > 1
    diffs = []
    for (hx, hy), (dx, dy) in zip(host, device):
        assert dx.dtype == hx.dtype == torch.float32 and dx.shape == hx.shape
        assert torch.equal(hy, dy)
        diffs.append((hx - dx).abs().mean())
    return float(torch.stack(diffs).mean())
