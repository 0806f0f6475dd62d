"""Two operating points, in loader-only mode: preprocessed tensors against JPEG decoded per sample.

Prints images/s of `data=synthetic` and of `data=encoded data.augment=standard` at num_workers 0 and 2
(persistent workers, steady-state epochs only), and the ratio workers-2 / workers-0 for each. With
per-sample decoding the workers pay off (two cores cap the ratio near 2); with in-memory tensors the
per-sample fetch and inter-process transfer cost more than the indexing they replace, so the ratio is
expected below 1.

    python benchmarks/operating_point.py [--epochs 3] [--num-train 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config import register_configs  # noqa: E402
from wif.data import load_datasets  # noqa: E402
from wif.loaders import build_batches  # noqa: E402
from wif.loop import loader_epoch  # noqa: E402
from wif.transfer import make_transfer  # noqa: E402


def images_per_s(overrides: list, workers: int, epochs: int) -> float:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        knobs = [f"loader.num_workers={workers}"] + (["loader.persistent_workers=true"] if workers else [])
        conf = OmegaConf.to_object(compose("config", overrides=overrides + knobs))
    data = load_datasets(conf.data)
    cpu = torch.device("cpu")
    batches = build_batches(data.train, conf.loader, conf.data.batch_size, train=True, seed=0, pin=False,
                            resident=False)
    transfer = make_transfer(conf.transfer, cpu)
    stats = [loader_epoch(batches, transfer, cpu) for _ in range(epochs)]
    return statistics.median(s.samples / s.epoch_time_s for s in stats[1:])  # the first starts the workers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--num-train", type=int, default=3000)
    args = ap.parse_args()
    register_configs()
    cache = tempfile.mkdtemp(prefix="wif-op-")
    common = ["preset=smoke", "loader=baseline", "data.fraction=1.0", f"data.num_train={args.num_train}",
              f"data.cache_dir={cache}"]
    points = {  # name: (overrides, what to expect of the ratio)
        "synthetic (tensors in RAM)": (["data=synthetic"], "expected below 1 for in-memory tensors"),
        "encoded, augment=standard": (["data=encoded", "data.augment=standard"], "target >= 1.25"),
    }
    print(f"{'data':<30}{'workers=0 img/s':>18}{'workers=2 img/s':>18}{'ratio 2/0':>12}")
    for name, (extra, expect) in points.items():
        w0 = images_per_s(common + extra, 0, args.epochs)
        w2 = images_per_s(common + extra, 2, args.epochs)
        print(f"{name:<30}{w0:>18,.0f}{w2:>18,.0f}{w2 / w0:>12.2f}  ({expect})")


if __name__ == "__main__":
    main()
