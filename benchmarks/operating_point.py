"""Two operating points, in loader-only mode, on every loader engine: preprocessed tensors against JPEG
decoded per sample, at 0 and 2 workers, side by side in one run.

Prints images/s of `data=synthetic` and of `data=encoded data.augment=standard` for each engine
(`dataloader`, `spdl`, `nodes_threads`, `nodes_procs`) at num_workers 0 and 2, and the ratio
workers-2 / workers-0. DataLoader's workers are persistent here (steady-state epochs only; the first
epoch starts them and is left out); torchdata.nodes starts its workers at every epoch, and SPDL its
threads, as they do in training. An engine that takes no 0-worker setting shows "-".

With per-sample decoding DataLoader's workers pay off (two cores cap the ratio near 2); with in-memory
tensors the per-sample fetch and inter-process transfer cost more than the indexing they replace, so
its ratio is expected below 1. Thread engines decode under the GIL (torchvision's decoders release it
only in part).

    python benchmarks/operating_point.py [--epochs 4] [--num-train 3000] [--engines dataloader,spdl]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config import ConfigError, EngineName, register_configs, validate  # noqa: E402
from wif.data.datasets import load_datasets  # noqa: E402
from wif.data.engines import build_engine_batches  # noqa: E402
from wif.data.loaders import Reading  # noqa: E402
from wif.data.transfer import make_transfer  # noqa: E402
from wif.run.loop import loader_epoch  # noqa: E402


def images_per_s(overrides: List[str], engine: str, workers: int, epochs: int) -> Optional[float]:
    """Median steady-state images/s, or None where the engine refuses the setting."""
    persistent = workers and engine == EngineName.dataloader.value
    knobs = [f"engine={engine}", f"loader.num_workers={workers}"] + (
        ["loader.persistent_workers=true"] if persistent else []
    )
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        conf = OmegaConf.to_object(compose("config", overrides=overrides + knobs))
    try:
        validate(conf)
    except ConfigError:
        return None
    data = load_datasets(conf.data)
    cpu = torch.device("cpu")
    batches = build_engine_batches(
        data.train,
        conf.loader,
        conf.engine,
        Reading(batch_size=conf.data.batch_size, train=True, seed=0),
        data=conf.data,
        device=cpu,
    )
    transfer = make_transfer(conf.transfer, cpu)
    threads = torch.get_num_threads()  # torchdata's thread workers set it to 1 for the whole process
    try:
        stats = [loader_epoch(batches, transfer, cpu) for _ in range(epochs)]
    finally:
        torch.set_num_threads(threads)  # in training each run is its own process; here the next one must not inherit it
    return statistics.median(s.samples / s.epoch_time_s for s in stats[1:])  # the first starts the workers


def _cell(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--num-train", type=int, default=3000)
    ap.add_argument("--engines", default=",".join(e.value for e in EngineName))
    args = ap.parse_args()
    register_configs()
    cache = tempfile.mkdtemp(prefix="wif-op-")
    common = [
        "preset=smoke",
        "loader=baseline",
        "data.fraction=1.0",
        f"data.num_train={args.num_train}",
        f"data.cache_dir={cache}",
    ]
    points = {  # name: (overrides, what to expect of DataLoader's ratio)
        "synthetic (tensors in RAM)": (["data=synthetic"], "DataLoader: expected below 1 for in-memory tensors"),
        "encoded, augment=standard": (["data=encoded", "data.augment=standard"], "DataLoader: target >= 1.25"),
    }
    print(f"{'data':<30}{'engine':<16}{'workers=0 img/s':>18}{'workers=2 img/s':>18}{'ratio 2/0':>12}")
    for name, (extra, expect) in points.items():
        for engine in args.engines.split(","):
            w0 = images_per_s(common + extra, engine, 0, args.epochs)
            w2 = images_per_s(common + extra, engine, 2, args.epochs)
            ratio = f"{w2 / w0:>12.2f}" if w0 and w2 else f"{'-':>12}"
            note = f"  ({expect})" if engine == EngineName.dataloader.value else ""
            print(f"{name:<30}{engine:<16}{_cell(w0):>18}{_cell(w2):>18}{ratio}{note}", flush=True)


if __name__ == "__main__":
    main()
