"""An image folder is checked once, before any run: unreadable files stop it (or are left out), the
verdict is cached per file, and a sweep checks each folder once before its first job."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import run_train, train_runs
from tests.images import data_cfg, image_folder
from wif.config import ConfigError
from wif.data.folder_check import LIST_LIMIT, check_folder, require_readable

SMALL = ("preset=smoke", "data=folder", "data.fraction=1.0", "data.val_split=0.25", "trainer.epochs=2")


def _png(path: Path) -> None:
    from torchvision.io import write_png

    write_png(torch.zeros((3, 8, 8), dtype=torch.uint8), str(path))


def test_the_verdict_is_cached_per_file_and_only_changes_are_decoded_again(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "images", bad=True)
    cfg = data_cfg(tmp_path / "cache", "data=folder", f"data.root={root}")
    first = check_folder(cfg)
    assert (first.total, first.decoded) == (17, 17) and set(first.bad) == {"train/class0/broken.png"}
    second = check_folder(cfg)
    assert second.decoded == 0 and second.bad == first.bad  # the listing alone: nothing decoded
    _png(root / "train" / "class0" / "broken.png")  # repaired
    (root / "test" / "class1" / "new.png").write_bytes(b"not an image either")  # added, broken
    third = check_folder(cfg)
    assert (third.total, third.decoded) == (18, 2) and set(third.bad) == {"test/class1/new.png"}


def test_the_message_names_the_first_files_and_counts_the_rest(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "images")
    extra = LIST_LIMIT + 5
    for i in range(extra):
        (root / "train" / "class1" / f"bad{i:02d}.png").write_bytes(b"\x89PNG truncated")
    cfg = data_cfg(tmp_path / "cache", "data=folder", f"data.root={root}")
    with pytest.raises(ConfigError) as err:
        require_readable(cfg)
    message = str(err.value)
    assert f"{extra} of {16 + extra} image files" in message and "and 5 more" in message
    assert f"bad{LIST_LIMIT - 1:02d}.png" in message and f"bad{LIST_LIMIT:02d}.png" not in message
    assert "data.skip_bad=true" in message and "\n" not in message
    skipping = data_cfg(tmp_path / "cache", "data=folder", f"data.root={root}", "data.skip_bad=true")
    assert len(require_readable(skipping).bad) == extra  # left out, not refused


@pytest.mark.slow
def test_a_corrupt_file_stops_the_run_before_training_unless_skipped(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    root = image_folder(tmp_path / "images", bad=True)
    proc = run_train(tmp_path, store, cache_dir, *SMALL, f"data.root={root}", multirun=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "train/class0/broken.png" in out and "Traceback" not in out and "epoch" not in out, out[-3000:]
    assert not train_runs(store)  # no run created, FINISHED or FAILED

    proc = run_train(tmp_path, store, cache_dir, *SMALL, f"data.root={root}", "data.skip_bad=true", multirun=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "checking" not in out  # the verdict of the first command, from the cache
    (run,) = train_runs(store)
    assert run.info.status == "FINISHED" and run.data.params["data.skipped_files"] == "1"
    assert int(run.data.tags["wif.n_train"]) + int(run.data.tags["wif.n_val"]) == 8  # the 8 good ones, not 9


@pytest.mark.slow
def test_a_sweep_checks_each_folder_once_and_refuses_before_its_first_job(
    tmp_path: Path, store: str, cache_dir: Path
) -> None:
    good, bad = image_folder(tmp_path / "good"), image_folder(tmp_path / "bad", bad=True)
    proc = run_train(tmp_path, store, cache_dir, *SMALL, f"data.root={bad},{good}", "loader=baseline,pin")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "2 of 4 jobs" in out and f"data.root={bad}" in out and "broken.png" in out, out[-3000:]
    assert out.count(f"image file(s) under {bad} on") == 1  # decoded once for its two jobs
    assert "started on" not in out and "Traceback" not in out and not train_runs(store)
