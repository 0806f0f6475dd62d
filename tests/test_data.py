"""The data: deterministic, cached once, verified on every load, split the same way every time."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import run_train, train_runs
from tests.images import data_cfg, image_folder
from wif.config import ConfigError
from wif.data.datasets import folder_arrays, load_datasets, split_indices
from wif.data.synthetic import VERIFIED, _read_cache, rows_of, synthetic_arrays


def test_synthetic_set_is_deterministic_and_cached(tmp_path: Path) -> None:
    cfg = data_cfg(tmp_path, "data.num_train=300", "data.num_test=100")
    first = synthetic_arrays(cfg)
    folders = list(tmp_path.iterdir())
    assert len(folders) == 1 and (folders[0] / "manifest.json").exists()
    stamp = (folders[0] / "train_x.npy").stat().st_mtime_ns
    again = synthetic_arrays(cfg)
    assert (folders[0] / "train_x.npy").stat().st_mtime_ns == stamp  # reused, not regenerated
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert first["train_x"].shape == (300, 3, 64, 64) and first["train_x"].dtype == np.uint8
    assert set(np.unique(first["train_y"])) == set(range(10))
    other = synthetic_arrays(data_cfg(tmp_path, "data.num_train=200", "data.num_test=100"))
    assert len(other["train_y"]) == 200 and len(list(tmp_path.iterdir())) == 2  # keyed by its parameters


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_cache_is_detected_and_regenerated(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = data_cfg(tmp_path, "data.num_train=300", "data.num_test=100")
    good = synthetic_arrays(cfg)
    target = next(tmp_path.iterdir()) / "train_x.npy"
    raw = bytearray(target.read_bytes())
    if damage == "truncate":
        target.write_bytes(raw[: len(raw) // 2])
    else:
        raw[-10] ^= 0xFF
        target.write_bytes(raw)
    with caplog.at_level(logging.WARNING):
        again = synthetic_arrays(cfg)
    assert "damaged" in caplog.text
    np.testing.assert_array_equal(good["train_x"], again["train_x"])
    assert synthetic_arrays(cfg)["train_x"].shape == good["train_x"].shape  # the rewritten cache verifies


def test_the_cache_is_checked_once_mapped_and_still_caught_when_written(tmp_path: Path) -> None:
    """The H100's jobs each read and hashed the whole set. Its checksums are now checked once: a later read of
    unchanged files maps them and hashes nothing; a write to a file is caught at the next read. A file written
    within RACY_S of the check is checked again: a write in the same clock tick would keep its times."""
    cfg = data_cfg(tmp_path, "data.num_train=300", "data.num_test=100")
    good = synthetic_arrays(cfg)
    folder = next(tmp_path.iterdir())
    synthetic_arrays(cfg, mmap=True)
    assert not (folder / VERIFIED).exists()  # just written: racy, so not stamped
    for f in folder.glob("*.npy"):
        os.utime(f, ns=(f.stat().st_atime_ns, time.time_ns() - int(60e9)))
    checked = synthetic_arrays(cfg, mmap=True)
    assert (folder / VERIFIED).exists() and isinstance(checked["train_x"], np.memmap)
    target = folder / "train_x.npy"
    raw = bytearray(target.read_bytes())
    raw[-10] ^= 0xFF
    target.write_bytes(raw)  # same size, same inode: its times tell
    with pytest.raises(ValueError, match="checksum mismatch"):
        _read_cache(folder, mmap=True)
    np.testing.assert_array_equal(synthetic_arrays(cfg)["train_x"], good["train_x"])  # regenerated


def _resident_kb(path: Path) -> int:
    """This process's resident pages of its mappings of `path`, from /proc/self/smaps."""
    kb, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if not line[:1].isupper():  # a mapping's first line: its address range, then its file
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            kb += int(line.split()[1])
    return kb


def test_a_mapped_set_is_checked_and_copied_from_its_files_never_through_its_mapping(tmp_path: Path) -> None:
    """A mapping's pages count in the run's RSS and USS while it is open, a touched page's neighbours with it:
    checked and copied through it, a tenth of a set put the whole set in the run's figures (USS 290 MB for 160)."""
    cfg = data_cfg(tmp_path, "data.num_train=2000", "data.num_test=100")
    synthetic_arrays(cfg)
    target = next(tmp_path.iterdir()) / "train_x.npy"
    arrays = _read_cache(target.parent, mmap=True)  # just written, so not stamped: every checksum is checked
    picked = rows_of(arrays["train_x"], np.arange(0, 2000, 10))
    assert isinstance(arrays["train_x"], np.memmap) and _resident_kb(target) < 64, _resident_kb(target)
    np.testing.assert_array_equal(picked, np.load(target)[::10])


def test_fraction_and_split_are_seeded_and_disjoint() -> None:
    train, val = split_indices(1000, 0.4, 0.2, seed=3)
    assert (len(train), len(val)) == (320, 80) and not set(train) & set(val)
    again = split_indices(1000, 0.4, 0.2, seed=3)
    assert (train == again[0]).all() and (val == again[1]).all()
    assert not (split_indices(1000, 0.4, 0.2, seed=4)[0] == train).all()


def test_datasets_are_normalized_float_tensors(tmp_path: Path) -> None:
    data = load_datasets(data_cfg(tmp_path, "data.fraction=0.5"))
    assert (len(data.train), len(data.val), len(data.test)) == (800, 200, 200)  # preset=smoke's 200 test images
    assert data.train.images.dtype == torch.float32 and data.train.labels.dtype == torch.int64
    assert -3 < data.train.images.mean().item() < 3 and data.num_classes == 10


def test_validation_and_test_evaluate_the_images_the_config_asks(tmp_path: Path) -> None:
    """data.val_images and data.test_images: at most that many, evenly spaced through the split; training
    untouched. Held tensors and images decoded per sample alike."""
    whole = load_datasets(data_cfg(tmp_path, "data.fraction=0.5"))
    some = load_datasets(data_cfg(tmp_path, "data.fraction=0.5", "data.val_images=50", "data.test_images=100"))
    assert (len(some.train), len(some.val), len(some.test)) == (800, 50, 100)
    assert torch.equal(some.train.images, whole.train.images)
    picked = np.linspace(0, 199, num=100).round().astype(np.int64)  # the first, the last and 98 between
    assert torch.equal(some.test.images, whole.test.images[picked]) and picked[-1] == 199
    assert set(some.test.labels.tolist()) == set(range(10))  # every class still tested
    decoded = load_datasets(data_cfg(tmp_path, "data=encoded", "data.fraction=0.5", "data.test_images=100"))
    assert (len(decoded.train), len(decoded.val), len(decoded.test)) == (800, 200, 100)
    big = load_datasets(data_cfg(tmp_path, "data.fraction=0.5", "data.val_images=5000"))
    assert len(big.val) == 200  # more than the split holds: all of it


def test_image_folder_is_decoded_and_resized(tmp_path: Path) -> None:
    arrays, n_classes = folder_arrays(data_cfg(tmp_path, "data=folder", f"data.root={image_folder(tmp_path / 'im')}"))
    assert (
        n_classes == 2 and arrays["train_x"].shape == (8, 3, 64, 64) and arrays["test_y"].tolist() == [0] * 4 + [1] * 4
    )


def test_image_folder_errors_name_the_problem(tmp_path: Path) -> None:
    bad = image_folder(tmp_path / "bad", bad=True)
    with pytest.raises(ConfigError, match="broken.png"):
        folder_arrays(data_cfg(tmp_path, "data=folder", f"data.root={bad}"))
    empty = image_folder(tmp_path / "empty", empty_class=True)
    with pytest.raises(ConfigError, match="class1"):
        folder_arrays(data_cfg(tmp_path, "data=folder", f"data.root={empty}"))


@pytest.mark.slow
def test_without_a_validation_split_no_validation_loader_runs(tmp_path: Path, store: str, cache_dir: Path) -> None:
    """data.val_split=0: no validation pass at all. An empty loader would still start its workers after every
    epoch, and their forks tax the next epoch (copy-on-write): +18% in benchmarks/your_workload.py."""
    proc = run_train(
        tmp_path,
        store,
        cache_dir,
        "preset=smoke",
        "data.val_split=0",
        "trainer.epochs=2",
        "loader.num_workers=1",
        "loader.persistent_workers=true",
        multirun=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = train_runs(store)
    assert run.info.status == "FINISHED" and run.data.tags["wif.n_val"] == "0"
    assert not {"val_acc", "val_loss", "val_time_s"} & set(run.data.metrics)
    assert "val_acc" not in proc.stdout + proc.stderr
