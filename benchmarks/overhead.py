"""What the harness costs: wif's epoch time against a fair hand-written loop, both in fresh processes.

Each round runs the bare loop once and one wif job for each harness checkout (`--harness-root`, default this
one), in an order that rotates round by round. Every side is a fresh `python` process, as a user's run is.
wif's job forks its training child as `train.py` does; the bare side forks its loop the same way, from a
process that has run no torch op, so both train on torch's default thread count. Both train the same model
on the same cached tensors, with the same seed, batch order, optimizer and `zero_grad(set_to_none=True)`,
and no per-step sync. Both evaluate the validation split after each epoch, outside the epoch's clock.

    python benchmarks/overhead.py [--rounds 6] [--epochs 4] [--num-train 5000] [--smoke-cadence]
                                  [--harness-root /tmp/wif-39d5b12 --harness-root .] [--device cuda --model googlenet]
    python benchmarks/overhead.py --count [--harness-root ...]   # per-step Python calls and torch ops, no clock

The headline is, per harness, the median of the per-round ratios wif / bare with its 95% bootstrap interval,
beside each side's per-round spread. `--count` answers what load cannot move: the Python calls and torch
ops one training step costs under the harness and in the bare loop. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
MARK = "OVERHEAD-RESULT "


# ----------------------------------------------------------------------------- one side, in its own process
def compose_conf(args: argparse.Namespace, cache: Path, store: str):
    """The run's config from the checkout on sys.path: the smoke preset, sized by `args`."""
    from hydra import compose, initialize_config_dir

    from wif.config import MeasureConfig, register_configs

    register_configs()
    # Epochs here last about a second, as the study's: measure at the study's cadence unless asked otherwise.
    sampling = [] if args.smoke_cadence else [f"measure.{k}={v}" for k, v in asdict(MeasureConfig()).items()]
    with initialize_config_dir(config_dir=str(Path(args.root).resolve() / "conf"), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "preset=smoke",
                f"device={args.device}",
                *([f"model={args.model}"] if args.model else []),
                "resume=false",
                f"trainer.epochs={args.epochs}",
                "data.fraction=1.0",
                f"data.num_train={args.num_train}",
                f"tracking.uri={store}",
                f"data.cache_dir={cache}",
                f"repeat={args.round}",  # a distinct job each round
                "seed=0",  # the same seed, batch order and weights on both sides
                *([f"trainer.threads={args.threads}"] if args.threads else []),
                *sampling,
            ],
        )
    return cfg


def bare_epoch(model, loader, opt, loss_fn, aux_weight: float, device) -> float:
    """One epoch of the loop a user writes, timed on the host clock between two synchronizations."""
    import torch

    from wif.run.model import training_loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model.train()
    sync()
    t0 = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = training_loss(model(x), y, loss_fn, aux_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync()
    return time.perf_counter() - t0


def bare_parts(conf, device):
    """The bare loop's model, optimizer, loss and loaders, seeded as wif seeds a run."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from wif.data.datasets import load_datasets
    from wif.run.model import build_model

    random.seed(conf.seed)
    np.random.seed(conf.seed)
    torch.manual_seed(conf.seed)
    data = load_datasets(conf.data)
    bs = conf.data.batch_size
    train = DataLoader(
        TensorDataset(data.train.images, data.train.labels),
        batch_size=bs,
        shuffle=True,
        generator=torch.Generator().manual_seed(conf.seed),
    )
    val = DataLoader(TensorDataset(data.val.images, data.val.labels), batch_size=bs)
    model = build_model(conf.model, data.num_classes).to(device)
    tr = conf.trainer
    opt = torch.optim.SGD(model.parameters(), lr=tr.lr, momentum=tr.momentum, weight_decay=tr.weight_decay)
    return model, opt, torch.nn.CrossEntropyLoss(), train, val


def bare_loop(conf, device_name: str, queue) -> None:
    """The reference, in a forked child: the epochs, each followed by an untimed validation pass."""
    import torch

    if conf.trainer.threads is not None:  # as wif's run sets them, before the first op
        torch.set_num_threads(conf.trainer.threads)
    device = torch.device(device_name)
    model, opt, loss_fn, train, val = bare_parts(conf, device)
    times = []
    for _ in range(conf.trainer.epochs):
        times.append(bare_epoch(model, train, opt, loss_fn, conf.model.aux_weight, device))
        model.eval()
        with torch.inference_mode():
            for x, y in val:
                loss_fn(model(x.to(device)), y.to(device))
    queue.put(times)


def bare_side(args: argparse.Namespace, cache: Path, store: str) -> dict:
    """The bare loop forked from this process, as wif forks its job's child."""
    from omegaconf import OmegaConf

    conf = OmegaConf.to_object(compose_conf(args, cache, store))
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=bare_loop, args=(conf, args.device, q))
    p.start()
    times = q.get()
    p.join()
    return {"epochs": times}


def wif_side(args: argparse.Namespace, cache: Path, store: str) -> dict:
    """One wif job, as `train.py` runs it; its epoch times and sampler cost read back from its record."""
    from mlflow.tracking import MlflowClient

    from wif.sweep.job import run_job

    cfg = compose_conf(args, cache, store)
    run_job(cfg)
    client = MlflowClient(store)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)[0]
    history = client.get_metric_history(run.info.run_id, "epoch_time_s")
    return {
        "epochs": [m.value for m in sorted(history, key=lambda m: m.step)],
        "sampler_cpu_pct": run.data.metrics.get("sampler_cpu_pct"),
    }


def counted(fn: Callable[[], object]) -> Dict[str, int]:
    """Python calls (profile 'call' events) and torch ops (profiler events) in one call of `fn`."""
    import torch

    calls = [0]

    def tally(frame, event, arg) -> None:  # noqa: ARG001 - sys.setprofile's signature
        if event == "call":
            calls[0] += 1

    sys.setprofile(tally)
    fn()
    sys.setprofile(None)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {"python_calls": calls[0], "torch_ops": len(prof.events())}


def count_side(args: argparse.Namespace, cache: Path, store: str) -> dict:
    """Per step, what the harness's train_epoch runs beyond the bare loop's epoch, over the same batches."""
    import torch
    from omegaconf import OmegaConf

    from wif.data.transfer import make_transfer
    from wif.run.loop import train_epoch
    from wif.run.step import Step

    conf = OmegaConf.to_object(compose_conf(args, cache, store))
    device = torch.device(args.device)
    model, opt, loss_fn, train, _ = bare_parts(conf, device)
    aux = conf.model.aux_weight
    step = Step(model, opt, loss_fn, aux, device)  # the same field order at 39d5b12 and today
    transfer = make_transfer(conf.transfer, device)
    if next(iter(inspect.signature(train_epoch).parameters)) == "step":
        harness = lambda: train_epoch(step, train, transfer)  # noqa: E731
    else:  # 39d5b12's signature
        harness = lambda: train_epoch(model, train, transfer, opt, loss_fn, aux, device, step=step)  # noqa: E731
    sides = {"wif": harness, "bare": lambda: bare_epoch(model, train, opt, loss_fn, aux, device)}
    for fn in sides.values():  # warm: the first epoch builds what later ones reuse
        fn()
    return {"steps": len(train), **{name: counted(fn) for name, fn in sides.items()}}


SIDES = {"bare": bare_side, "wif": wif_side, "count": count_side}


# ----------------------------------------------------------------------------- the driver
def run_side(side: str, root: Path, args: argparse.Namespace, r: int) -> dict:
    """Run one side in a fresh process with `root`'s wif first on its path; what it measured."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, __file__, "--side", side, "--root", str(root), "--round", str(r), "--work", args.work]
    cmd += ["--epochs", str(args.epochs), "--num-train", str(args.num_train), "--device", args.device]
    cmd += [*(["--model", args.model] if args.model else []), *(["--smoke-cadence"] if args.smoke_cadence else [])]
    cmd += ["--threads", str(args.threads)] if args.threads else []
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    got = json.loads(lines[-1][len(MARK) :]) if lines else {}
    if done.returncode or not got or len(got.get("epochs", [None] * (args.warmup + 1))) <= args.warmup:
        sys.exit(f"{side} at {root} failed or timed no steady epoch (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return got


def spread(xs: List[float], digits: int = 3) -> str:
    """min / median / max."""
    return " / ".join(f"{x:.{digits}f}" for x in (min(xs), statistics.median(xs), max(xs)))


def bootstrap_ci(values: List[float], level: float = 0.95, draws: int = 10_000) -> tuple:
    """Percentile bootstrap of the median: how far round-to-round noise lets the headline move."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int((1 - level) / 2 * draws)], medians[int((1 + level) / 2 * draws) - 1]


def print_ratio(label: str, ratios: List[float]) -> None:
    """A paired ratio's per-round spread and the median's interval."""
    lo, hi = bootstrap_ci(ratios)
    print(f"{label}: median {statistics.median(ratios):.3f}, 95% CI {lo:.3f} to {hi:.3f}, rounds {spread(ratios)}")


def time_rounds(args: argparse.Namespace, roots: List[Path]) -> None:
    """The rounds, each side in turn; the ratios wif / bare per harness, and between harnesses."""
    sides = [("bare", ROOT)] + [("wif", root) for root in roots]
    per: Dict[int, List[float]] = {i: [] for i in range(len(sides))}
    sampler: Dict[int, List[float]] = {i: [] for i in range(len(sides))}
    for r in range(args.rounds):
        order = list(range(len(sides)))
        order = order[r % len(order) :] + order[: r % len(order)]  # each side goes first in turn
        for i in order:
            got = run_side(sides[i][0], sides[i][1], args, r)
            per[i].append(statistics.median(got["epochs"][args.warmup :]))
            if got.get("sampler_cpu_pct") is not None:
                sampler[i].append(got["sampler_cpu_pct"])
        cells = ", ".join(f"{'bare' if i == 0 else roots[i - 1].name} {per[i][-1]:.3f}" for i in range(len(sides)))
        print(f"round {r + 1}/{args.rounds} (s/epoch, median of {args.epochs - args.warmup}): {cells}", flush=True)
    names = ["bare loop"] + [f"wif at {root.name}" for root in roots]
    width = max(map(len, names))
    print(f"\nper-round median epoch time, min / median / max over {args.rounds} rounds:")
    for i, name in enumerate(names):
        print(f"  {name:<{width}}  {spread(per[i])} s")
    for i, root in enumerate(roots, 1):
        print_ratio(f"wif at {root} / bare", [w / b for w, b in zip(per[i], per[0])])
    for i, root in enumerate(roots[1:], 2):
        print_ratio(f"wif at {root} / wif at {roots[0]}", [w / b for w, b in zip(per[i], per[1])])
    for i, root in enumerate(roots, 1):
        if sampler[i]:
            print(f"sampler's own CPU at {root.name}: median {statistics.median(sampler[i]):.2f}% of one core")


def print_counts(args: argparse.Namespace, roots: List[Path]) -> None:
    """Per step: Python calls and torch ops under each harness and in the bare loop, and the difference."""
    for root in roots:
        got = run_side("count", root, args, 0)
        n, w, b = got["steps"], got["wif"], got["bare"]
        print(f"{root} ({n} steps an epoch), per step:")
        for key in ("python_calls", "torch_ops"):
            print(f"  {key:<13} wif {w[key] / n:8.1f}  bare {b[key] / n:8.1f}  extra {(w[key] - b[key]) / n:7.1f}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1, help="epochs left out of each side's figure")
    ap.add_argument("--num-train", type=int, default=5000)
    ap.add_argument("--smoke-cadence", action="store_true", help="sample at the smoke preset's cadence")
    ap.add_argument("--device", default="cpu", help="cpu or cuda: where both sides train")
    ap.add_argument("--model", default=None, help="a model config (googlenet: the study's); default: tiny")
    ap.add_argument("--threads", type=int, default=None, help="torch threads on both sides (trainer.threads)")
    ap.add_argument(
        "--harness-root", action="append", type=Path, help="a checkout whose wif is timed; repeat it to take turns"
    )
    ap.add_argument("--count", action="store_true", help="count calls and ops per step instead of timing")
    ap.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    ap.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> None:
    args = parse()
    if args.side:  # one side, in this fresh process; its wif comes from PYTHONPATH=--root
        work = Path(args.work)
        tag = hashlib.sha1(str(Path(args.root).resolve()).encode()).hexdigest()[:8]  # a checkout's own cache and store
        cache, store = work / f"cache-{tag}", f"sqlite:///{work / f'mlflow-{tag}.db'}"
        print(MARK + json.dumps(SIDES[args.side](args, cache, store)), flush=True)
        return
    roots = [p.resolve() for p in (args.harness_root or [ROOT])]
    args.work = tempfile.mkdtemp(prefix="wif-overhead-")
    (print_counts if args.count else time_rounds)(args, roots)


if __name__ == "__main__":
    main()
