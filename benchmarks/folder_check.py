"""What the up-front check of an image folder costs: a 50,000-file folder of 64x64 PNGs (the study's size
and images, three of them corrupt), checked twice: the first check decodes every file, the second finds
the verdict in its cache and only lists the folder (target: well under a second). A third check after one
file changed decodes that file alone.

    python benchmarks/folder_check.py [--files 50000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config import DataConfig, DataSource  # noqa: E402
from wif.data.folder_check import check_folder  # noqa: E402
from wif.data.synthetic import generate_synthetic  # noqa: E402

CLASSES = 10
TEST_SHARE = 0.2  # of the files, in test/
CORRUPT = 3


def write_folder(root: Path, n_files: int) -> None:
    """The study's synthetic images (noise and all) as PNG files, train/ and test/, one folder per class."""
    from torchvision.io import write_png

    n_test = int(n_files * TEST_SHARE)
    images = generate_synthetic(DataConfig(num_train=n_files - n_test, num_test=n_test, num_classes=CLASSES))
    for part in ("train", "test"):
        for c in range(CLASSES):
            (root / part / f"class{c}").mkdir(parents=True)
        for i, (x, y) in enumerate(zip(images[f"{part}_x"], images[f"{part}_y"])):
            write_png(torch.from_numpy(np.ascontiguousarray(x)), str(root / part / f"class{y}" / f"{i:05d}.png"))
    for i in range(CORRUPT):  # replace a few: the folder keeps its size
        victim = next((root / "train" / f"class{i}").iterdir())
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # truncated, as a failed copy leaves it


def timed(cfg: DataConfig, what: str) -> None:
    t0 = time.perf_counter()
    verdict = check_folder(cfg)
    seconds = time.perf_counter() - t0
    print(
        f"{what:<28} {seconds:7.2f} s  ({verdict.total} files, {verdict.decoded} decoded, "
        f"{len(verdict.bad)} unreadable)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--keep", type=Path, help="write the folder here and keep it (default: a temp dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    work = args.keep or Path(tempfile.mkdtemp(prefix="wif-folder-check-"))
    try:
        t0 = time.perf_counter()
        write_folder(work / "images", args.files)
        print(f"wrote {args.files} PNGs in {time.perf_counter() - t0:.0f} s under {work / 'images'}")
        cfg = DataConfig(source=DataSource.folder, root=str(work / "images"), cache_dir=str(work / "cache"))
        timed(cfg, "first check (decodes all)")
        timed(cfg, "second check (cached)")
        changed = next((work / "images" / "test" / "class9").iterdir())
        changed.write_bytes(changed.read_bytes())  # the same bytes, a new mtime
        timed(cfg, "after one file changed")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
