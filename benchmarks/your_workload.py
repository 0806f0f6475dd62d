"""wif's epoch time against a hand-written loop on the same workload; prints both medians and their ratio.

The workload: data=folder at 224 px, resnet18, the ImageNet example's transforms, the same batch size and
workers. The hand-written loop is PyTorch's ImageNet example as a user writes it: torchvision.datasets.ImageFolder,
PIL decoding, transforms.RandomResizedCrop(224) and a flip, SGD. It is a plain `for` loop, timed with perf_counter
and a synchronize at the epoch's end. wif runs `python train.py data=folder data.image_size=224
data.augment=standard model=torchvision model.arch=resnet18` in a subprocess. Its figure is the run's
`epoch_time_median_s`. Both sides leave the first epoch out. Target: the ratio within 5% of 1.

Each side runs `--rounds` times, each in a fresh process, alternating which goes first (ABBA). The median over
rounds is compared: the machine may be shared. Both sides print their minor page faults per epoch. After each
worker's fork, every page the training process writes is first copied on write. That cost, about 1-2 us a fault
here, moves epoch times by several percent.

    python benchmarks/your_workload.py                  # 96 images, 1 worker, 5 epochs, 4 rounds: ~9 min on 2 cores
    python benchmarks/your_workload.py --epochs 3 --rounds 1  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from wif.measure import names

ROOT = Path(__file__).resolve().parents[1]


def make_folder(root: Path, images: int, classes: int = 2) -> Path:
    """An ImageFolder of random JPEGs of varied sizes (about ImageNet's), train/ and a small test/."""
    import torch
    from torchvision.io import write_jpeg

    g = torch.Generator().manual_seed(0)
    for part, n in (("train", images), ("test", max(classes, images // 8))):
        for i in range(n):
            d = root / part / f"class{i % classes}"
            d.mkdir(parents=True, exist_ok=True)
            h, w = 300 + (i * 37) % 200, 350 + (i * 53) % 200
            write_jpeg(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g), str(d / f"{i}.jpg"))
    return root


def hand_written(
    root: Path, epochs: int, batch_size: int, workers: int, device: str
) -> Tuple[List[float], List[float], List[float]]:
    """The ImageNet example's training loop, timed per epoch; also the seconds each epoch waited in next() and
    the minor page faults of this process in each epoch (as wif logs its run's: `minor_faults`)."""
    import resource

    import torch
    import torchvision
    from torchvision import transforms

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train = torchvision.datasets.ImageFolder(
        str(root / "train"),
        transforms.Compose(
            [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize]
        ),
    )
    loader = torch.utils.data.DataLoader(
        train, batch_size=batch_size, shuffle=True, num_workers=workers, pin_memory=device == "cuda"
    )
    dev = torch.device(device)
    model = torchvision.models.resnet18(num_classes=len(train.classes)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    times, waits, faults = [], [], []
    for _ in range(epochs):
        model.train()
        if device == "cuda":
            torch.cuda.synchronize()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        waited, t_wait = 0.0, t0
        for x, y in loader:
            waited += time.perf_counter() - t_wait
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            t_wait = time.perf_counter()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        waits.append(waited)
        faults.append(float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0))
    return times, waits, faults


@dataclass(frozen=True)
class Workload:
    """What both sides train on, and how."""

    root: Path  # the ImageFolder: train/ and test/
    epochs: int
    batch_size: int
    workers: int
    device: str


def hand_written_fresh(load: Workload) -> Tuple[List[float], List[float], List[float]]:
    """hand_written in a fresh process, as a user's script runs and as wif's run is.

    A process that ran earlier rounds has an older heap: more of its pages are copied on write after each worker's
    fork. Measured: 490k minor faults an epoch in its first round, 660k by its third, 4.46 s against 4.70 s.
    """
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from your_workload import hand_written; "
        "from pathlib import Path; print(json.dumps(hand_written(Path(sys.argv[2]), *map(int, sys.argv[3:6]), "
        "sys.argv[6])))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(Path(__file__).parent),
            str(load.root),
            str(load.epochs),
            str(load.batch_size),
            str(load.workers),
            load.device,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    times, waits, faults = json.loads(out.stdout.strip().splitlines()[-1])
    return times, waits, faults


def hand_side(load: Workload) -> Tuple[float, float, float]:
    """The hand-written loop's median epoch time, data wait and minor faults, its first epoch left out."""
    times, waits, faults = hand_written_fresh(load)
    return (
        statistics.median(times[1:] or times),
        statistics.median(waits[1:] or waits),
        statistics.median(faults[1:] or faults),
    )


def with_wif(load: Workload, work: Path, extra: List[str], env_extra: List[str]) -> Tuple[float, float, float]:
    """train.py on the same folder; its run's median epoch time (warm-up left out), data wait and minor faults.

    Args:
        load: the workload both sides train.
        work: the folder of the run's store and cache.
        extra: overrides for train.py, KEY=VALUE.
        env_extra: environment variables for train.py, NAME=VALUE.
    """
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{work / 'mlflow.db'}"
    loader = "pin_nb" if load.device == "cuda" else "baseline"
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "data=folder",
        f"data.root={load.root}",
        "data.image_size=224",
        "data.augment=standard",
        "model=torchvision",
        "model.arch=resnet18",
        f"loader={loader}",
        f"loader.num_workers={load.workers}",
        f"data.batch_size={load.batch_size}",
        "data.fraction=1",
        "data.val_split=0",
        f"trainer.epochs={load.epochs}",
        f"device={load.device}",
        "resume=false",
        "progress=false",
        *extra,
    ]
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": store,
        "WIF_CACHE_DIR": str(work / "cache"),
        **dict(kv.split("=", 1) for kv in env_extra),
    }
    subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True, text=True)
    client = MlflowClient(store)
    runs = client.search_runs(
        [client.get_experiment_by_name("who_is_faster").experiment_id],
        "attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
    )
    steady = []
    for key in (names.DATA_WAIT_S, names.MINOR_FAULTS):
        h = sorted(client.get_metric_history(runs[0].info.run_id, key), key=lambda m: m.step)
        steady.append(statistics.median(m.value for m in h[1:] or h) if h else float("nan"))
    return runs[0].data.metrics[names.EPOCH_TIME_MEDIAN_S], steady[0], steady[1]


def parse_args() -> argparse.Namespace:
    """The benchmark's flags."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=96, help="training images (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=5, help="epochs per side, the first left out (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds of both sides (default: %(default)s)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when there is one")
    p.add_argument(
        "--wif",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for wif's side, again for more (e.g. --wif measure.pss_budget_pct=0)",
    )
    p.add_argument(
        "--wif-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for wif's side only (e.g. --wif-env MALLOC_MMAP_THRESHOLD_=131072)",
    )
    return p.parse_args()


def run_round(r: int, load: Workload, work: Path, args: argparse.Namespace) -> Dict[str, Tuple[float, float, float]]:
    """Run round `r` of both sides and print it; each side's median epoch time, data wait and minor faults."""
    sides = {}
    # ABBA: odd rounds run wif first, so a drift within a round (clock, heat) favours neither side
    for side in ("hand", "wif") if r % 2 == 0 else ("wif", "hand"):
        if side == "hand":
            sides[side] = hand_side(load)
        else:
            sides[side] = with_wif(load, work, extra=args.wif, env_extra=args.wif_env)
    print(
        f"round {r + 1} ({'hand first' if r % 2 == 0 else 'wif first'}): "
        + ", ".join(
            f"{name} {t:.3f} s/epoch (data wait {wait:.3f} s, {faults:,.0f} minor faults)"
            for name, (t, wait, faults) in (("hand-written", sides["hand"]), ("wif", sides["wif"]))
        ),
        flush=True,
    )
    return sides


def main() -> None:
    args = parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        load = Workload(
            root=make_folder(work / "images", args.images),
            epochs=args.epochs,
            batch_size=args.batch_size,
            workers=args.workers,
            device=device,
        )
        rounds = [run_round(r, load, work, args) for r in range(args.rounds)]
    hand, wif = [sides["hand"][0] for sides in rounds], [sides["wif"][0] for sides in rounds]
    h, w = statistics.median(hand), statistics.median(wif)
    paired = [b / a for a, b in zip(hand, wif)]  # each round's two sides ran back to back: the machine's drift cancels
    print(
        f"per-round ratios wif / hand-written: {', '.join(f'{r:.3f}' for r in paired)} "
        f"(median {statistics.median(paired):.3f})"
    )
    print(
        f"data=folder 224 px, resnet18, {args.images} images, batch {args.batch_size}, {args.workers} workers, "
        f"{device}: hand-written {h:.3f} s/epoch, wif {w:.3f} s/epoch, wif / hand-written = {w / h:.3f} "
        "(target: within 5% of 1)"
    )


if __name__ == "__main__":
    main()
