"""What the harness costs: wif's epoch time against a minimal hand-written PyTorch loop.

Same model, same data, same batch size and epochs; the two alternate round by round in this one process
run (each in its own forked child, as wif runs jobs), so drift on a shared machine hits both alike.
Prints the ratio of steady-state epoch times (target: at most 1.03 on a 2-core CPU) and the memory
sampler's own CPU cost.

    python benchmarks/overhead.py [--rounds 12] [--epochs 4] [--num-train 5000] [--smoke-cadence]
                                  [--device cuda --model googlenet]

On a GPU both sides copy each batch with a plain `.to(device)` (wif's baseline option) and the bare loop
synchronizes before it reads the clock at each epoch's ends, as wif does.

The two sides alternate which goes first; the headline is the median of the per-round ratios, which a
machine that drifts between rounds (a shared one: epoch times here move by 30% from round to round)
leaves alone.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wif.config import MeasureConfig, register_configs  # noqa: E402
from wif.data.datasets import load_datasets  # noqa: E402
from wif.measure import names  # noqa: E402
from wif.run.forking import preload  # noqa: E402
from wif.run.model import build_model, training_loss  # noqa: E402
from wif.run.training import seed_everything  # noqa: E402
from wif.sweep.job import run_job  # noqa: E402


def bare_loop(conf, device: str, queue) -> None:
    """The reference: nothing but the loop a user would write, timed per epoch on the host clock."""
    seed_everything(conf.seed)
    data = load_datasets(conf.data)
    loader = DataLoader(
        TensorDataset(data.train.images, data.train.labels), batch_size=conf.data.batch_size, shuffle=True
    )
    on = torch.device(device)
    sync = torch.cuda.synchronize if on.type == "cuda" else (lambda: None)
    model = build_model(conf.model, data.num_classes).to(on)
    opt = torch.optim.SGD(
        model.parameters(), lr=conf.trainer.lr, momentum=conf.trainer.momentum, weight_decay=conf.trainer.weight_decay
    )
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for _ in range(conf.trainer.epochs):
        model.train()
        sync()
        t0 = time.perf_counter()
        for x, y in loader:
            x, y = x.to(on), y.to(on)
            loss = training_loss(model(x), y, loss_fn, conf.model.aux_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync()
        times.append(time.perf_counter() - t0)
    queue.put(times)


def _bootstrap_ci(values: list, level: float = 0.95, draws: int = 10_000) -> tuple:
    """Percentile bootstrap of the median: how far round-to-round noise lets the headline move."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return medians[int((1 - level) / 2 * draws)], medians[int((1 + level) / 2 * draws) - 1]


def wif_round(cfg, client: MlflowClient, r: int) -> list:
    """Run round `r`'s wif job in this process, which forks it; its epoch times from its record."""
    cfg.repeat = r  # a distinct job each round (the seed is fixed below, for both sides alike)
    cfg.seed = 0
    run_job(cfg)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    run = client.search_runs([exp.experiment_id], f"tags.`{names.TAG_BLOCK}` = '{r}'")[0]
    history = client.get_metric_history(run.info.run_id, names.EPOCH_TIME_S)
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def bare_round(ctx, conf, device: str) -> list:
    """Run the bare loop in a forked child; its epoch times."""
    q = ctx.Queue()
    p = ctx.Process(target=bare_loop, args=(conf, device, q))
    p.start()
    times = q.get()
    p.join()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--num-train", type=int, default=5000)
    ap.add_argument("--smoke-cadence", action="store_true", help="sample at the smoke preset's cadence")
    ap.add_argument("--device", default="cpu", help="cpu or cuda: where both sides train")
    ap.add_argument(
        "--model", default=None, help="a model config (googlenet: the study's); default the smoke preset's tiny model"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wif-overhead-"))
    store = f"sqlite:///{work / 'mlflow.db'}"
    register_configs()
    # The smoke preset samples faster, for its sub-second epochs; epochs here last about a second, as the
    # study's last many: measure at the study's cadence unless asked otherwise.
    sampling = [] if args.smoke_cadence else [f"measure.{k}={v}" for k, v in asdict(MeasureConfig()).items()]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
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
                f"data.cache_dir={work / 'cache'}",
                *sampling,
            ],
        )
    from omegaconf import OmegaConf

    conf = OmegaConf.to_object(cfg)
    preload()
    warm = conf.trainer.warmup_epochs
    ctx = mp.get_context("fork")
    # Generate the data cache before timing anything, in a child: this process forks every run and must
    # never start torch's compute thread pools itself (they do not survive a fork).
    gen = ctx.Process(target=load_datasets, args=(conf.data,))
    gen.start()
    gen.join()
    wif_times, bare_times, round_ratios = [], [], []
    client = MlflowClient(store)
    for r in range(args.rounds):
        # Alternate which side goes first, so that drift within a round favours neither.
        if r % 2 == 0:
            wif, bare = wif_round(cfg, client, r), bare_round(ctx, conf, args.device)
        else:
            bare, wif = bare_round(ctx, conf, args.device), wif_round(cfg, client, r)
        wif_times += wif[warm:]
        bare_times += bare[warm:]
        round_ratios.append(statistics.median(wif[warm:]) / statistics.median(bare[warm:]))
        print(
            f"round {r + 1}/{args.rounds}: wif {statistics.median(wif[warm:]):.3f}, "
            f"bare {statistics.median(bare[warm:]):.3f} s/epoch",
            flush=True,
        )
    exp = client.get_experiment_by_name(conf.tracking.experiment)
    runs = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'")
    sampler = [run.data.metrics[names.SAMPLER_CPU_PCT] for run in runs]
    w, b = statistics.median(wif_times), statistics.median(bare_times)
    paired = statistics.median(round_ratios)
    print(
        f"\nmedian epoch time over {len(wif_times)} epochs each: wif {w:.4f} s, bare loop {b:.4f} s "
        f"(ratio of medians {w / b:.3f})"
    )
    print(f"per-round ratios: {', '.join(f'{x:.3f}' for x in round_ratios)}")
    lo, hi = _bootstrap_ci(round_ratios)
    print(f"ratio wif / bare (median of paired rounds): {paired:.3f}, 95% CI {lo:.3f} to {hi:.3f}  (target <= 1.03)")
    print(
        f"sampler's own CPU: median {statistics.median(sampler):.2f}% of one core "
        f"({statistics.median(sampler) / (torch.get_num_threads() or 1):.2f}% of {torch.get_num_threads()} threads)"
    )


if __name__ == "__main__":
    main()
