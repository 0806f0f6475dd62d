"""Storage formats side by side, warm and cold: images/s a DataLoader feeds from a folder of JPEGs, from
the same images packed into LMDB, and into tar shards, with the page cache warm and evicted before each
epoch (data.page_cache=cold).

The folder is written once from the study's generated images (data=encoded's JPEG bytes, as files) into
WIF_CACHE_DIR, so a second run only reads it; the packs are made from it once, into the same cache. Each
cell runs the real `train.py` in loader-only mode (the loader alone, timed as training times it), every
cell in one run of this script, warm and cold of a format one after the other. Prints the median images/s
over the measured epochs, the cold/warm ratio, what a cold epoch read from storage, and each pack's size.

    python benchmarks/formats.py [--images 50000] [--workers 2] [--epochs 3] [--formats folder,lmdb,shards]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config.compose import load_config  # noqa: E402
from wif.data.formats.source import encoded_files  # noqa: E402
from wif.measure import names  # noqa: E402


def image_folder(images: int) -> Path:
    """The generated images as a folder of JPEGs (train/<class>/<i>.jpg), written once into the cache."""
    conf = load_config(["data=encoded", f"data.num_train={images}", f"data.num_test={max(images // 50, 10)}"])
    t0 = time.perf_counter()
    listing = encoded_files(conf.data)
    print(
        f"folder: {listing.where} ({sum(len(p) for p in listing.paths.values())} JPEGs, "
        f"{time.perf_counter() - t0:.0f} s to generate or find)",
        flush=True,
    )
    return Path(listing.where)


def run_cell(fmt: str, cache: str, args: argparse.Namespace, root: Path, store: str, work: Path) -> None:
    """Run train.py loader-only on one format, warm or cold; exit with its error if it fails.

    Args:
        fmt: the data.format.
        cache: the data.page_cache, warm or cold.
        args: the benchmark's flags: --epochs and --workers.
        root: the folder of JPEGs.
        store: the MLflow store every cell logs to.
        work: the folder train.py runs in.
    """
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "preset=smoke",
        "data=folder",
        f"data.root={root}",
        "data.fraction=1.0",
        f"data.format={fmt}",
        f"data.page_cache={cache}",
        "trainer.mode=loader_only",
        f"trainer.epochs={args.epochs}",
        "loader=pin_nb_w4_pf2",
        f"loader.num_workers={args.workers}",
        "progress=false",
    ]
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{fmt} {cache}: train.py failed\n{proc.stderr[-2000:]}")
    print(f"  {fmt:7s} {cache:4s} done in {time.perf_counter() - t0:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--formats", default="folder,lmdb,shards")
    args = parser.parse_args()
    formats = args.formats.split(",")
    root = image_folder(args.images)
    work = Path(tempfile.mkdtemp(prefix="wif-formats-"))
    store = f"sqlite:///{work / 'mlflow.db'}"
    for fmt in formats:
        for cache in ("warm", "cold"):
            run_cell(fmt, cache, args=args, root=root, store=store, work=work)
    client = MlflowClient(store)
    rate, read, size, n = {}, {}, {}, 0
    for r in client.search_runs(
        [client.get_experiment_by_name("who_is_faster").experiment_id], f"tags.`{names.TAG_KIND}` = 'loader'"
    ):
        key = (r.data.params["data.format"], r.data.params["data.page_cache"])
        rate[key] = statistics.median(
            h.value for h in client.get_metric_history(r.info.run_id, names.THROUGHPUT_IMG_S) if h.step >= 1
        )  # epoch 0: warm-up
        read[key] = statistics.median(
            h.value for h in client.get_metric_history(r.info.run_id, names.STORAGE_READ_BYTES) if h.step >= 1
        )
        size[key[0]], n = int(r.data.params["data.pack_bytes"]), int(r.data.tags[names.TAG_N_TRAIN])
    print(
        f"\n{args.images} generated images ({n} per epoch), loader-only, {args.workers} workers, "
        f"median of {args.epochs - 1} measured epochs"
    )
    print(
        f"{'format':8s} {'warm img/s':>11s} {'cold img/s':>11s} {'cold/warm':>10s} {'MiB read cold':>14s} "
        f"{'MiB read warm':>14s} {'on disk MiB':>12s}"
    )
    for fmt in formats:
        w, c = rate[(fmt, "warm")], rate[(fmt, "cold")]
        print(
            f"{fmt:8s} {w:11.0f} {c:11.0f} {c / w:10.2f} {read[(fmt, 'cold')] / 2**20:14.1f} "
            f"{read[(fmt, 'warm')] / 2**20:14.1f} {size[fmt] / 2**20:12.1f}"
        )


if __name__ == "__main__":
    main()
