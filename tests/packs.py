"""Packs made small, and damaged on purpose, for the tests of a corrupt pack or a truncated record
(tests/test_formats.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tests.images import jpeg_folder
from wif.tools.pack import main as wif_pack


def lmdb_put(path: Path, key: bytes, value: bytes) -> None:
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(path), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(key, value)
    env.close()


def truncate_tar_member(shard: Path) -> str:
    """Rewrite a shard with its first image cut in half; returns that member's name."""
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    first = next(m for m, _ in members if not m.name.endswith(".cls"))
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for m, data in members:
            if m is first:
                data = data[: len(data) // 2]
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    return first.name


def small_lmdb_pack(tmp_path: Path) -> Path:
    root = jpeg_folder(tmp_path / "images", per_class=2, test_per_class=1)
    out = tmp_path / "pack"
    assert (
        wif_pack(
            [
                "data=folder",
                f"data.root={root}",
                f"data.cache_dir={tmp_path / 'cache'}",
                "--to",
                "lmdb",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out
