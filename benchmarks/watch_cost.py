"""What `wif.watch` costs: the same training loop with and without it, alternated in fresh processes.

Each round runs the loop twice, each time in a new Python process (the order alternates round by round):
once as `for batch in loader:`, once as `for batch in wif.watch(loader):` (timed, sampled, logged to a
throw-away SQLite store). Each process times its own steady epochs on its own clock, from the third epoch's
start to the last epoch's end (what the watch does between epochs included: its PSS read and MLflow
logging), and the watch's one-time start (MLflow's import and the run's creation, after the first epoch) apart.
The headline is the median of the per-round ratios with a bootstrap 95% interval (target: within 1%), and
beside it the same ratio of the process's CPU seconds (all threads), both sides' minor page faults a batch and
each thread's CPU seconds. Both sides run with glibc's mmap threshold pinned (`--malloc fixed`): with glibc's
adaptive threshold this loop's tensors are mapped anew at every step (500-900 page faults a batch, a third of
the time in the kernel, a different amount in every process), which made the watched side 1.277x slower on
2026-11-26 where, pinned, it was 1.038x (0.920-1.101): the allocator, not the watch. With the adaptive
threshold and `--bare imports` (the bare side imports MLflow and opens the store after epoch 1, as the watch's
start does) the ratio was 1.008 (0.794-1.441): epoch time follows each process's faults (docs/benchmarks.md).

    python benchmarks/watch_cost.py [--rounds 12] [--epochs 6] [--n-train 4096] [--workers 0]
                                    [--malloc fixed] [--bare plain]

Run it on a quiet machine: on a shared one the rounds' noise is wider than 1%, and it says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def child(args: argparse.Namespace) -> None:
    """One side of a round: the loop, timed; prints one JSON line."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import wif

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.n_train, 3, 32, 32), torch.randint(0, 10, (args.n_train,)))
    loader = DataLoader(
        data, batch_size=64, shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0
    )
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    watched = args.side == "watch"
    marks: List[float] = []
    cpu: List[float] = []  # the process's CPU seconds, all threads (the watch's sampler and sender included)
    threads_at_3: Dict[str, float] = {}
    faults_at_3 = 0
    for epoch in range(args.epochs):
        marks.append(time.perf_counter())
        cpu.append(time.process_time())
        if epoch == 1 and args.side == "bare" and args.bare == "imports":  # what the watch's start does to the heap
            from mlflow.tracking import MlflowClient

            MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).search_experiments()
        if epoch == 2:
            threads_at_3, faults_at_3 = threads_cpu_s(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for x, y in wif.watch(loader, quiet=True) if watched else loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    marks.append(time.perf_counter())
    cpu.append(time.process_time())
    steady = marks[-1] - marks[2]  # epochs 3..E, each with what the watch did after the one before
    print(
        json.dumps(
            {
                "steady_s": steady,
                "steady_cpu_s": cpu[-1] - cpu[2],
                "first_s": marks[1] - marks[0],
                "start_s": marks[2] - marks[1],
                "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_at_3,
                "threads_cpu_s": {k: v - threads_at_3.get(k, 0.0) for k, v in threads_cpu_s().items()},
            }
        )
    )


def threads_cpu_s() -> Dict[str, float]:
    """CPU seconds of each of this process's threads so far, by Python name ('native' for threads Python did not
    start: torch's OpenMP pool, the allocator's): where a watched loop's extra CPU goes."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: Dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "native")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def one(side: str, args: argparse.Namespace, store: str) -> Dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        side,
        "--epochs",
        str(args.epochs),
        "--n-train",
        str(args.n_train),
        "--workers",
        str(args.workers),
        "--bare",
        args.bare,
    ]
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT)}
    if args.malloc == "fixed":  # glibc's mmap threshold pinned alike on both sides (see the module's docstring)
        env.update(MALLOC_MMAP_THRESHOLD_=str(64 << 20), MALLOC_TRIM_THRESHOLD_=str(256 << 20))
    env.pop("WIF_WATCH_ORDERS", None)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--n-train", type=int, default=4096)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument(
        "--malloc",
        choices=("fixed", "default"),
        default="fixed",
        help="fixed: both sides run with glibc's mmap threshold pinned (64 MiB), so that neither side's "
        "epochs depend on where the adaptive threshold happened to settle; default: as glibc has it",
    )
    p.add_argument(
        "--bare",
        choices=("plain", "imports"),
        default="plain",
        help="imports: the bare side also imports MLflow and opens the store after epoch 1, as the watch's "
        "start does, so that the sides differ only in the watch's per-batch and per-epoch work",
    )
    p.add_argument("--child", choices=("bare", "watch"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.epochs < 3:
        p.error("--epochs must be at least 3: the first is set apart, the second carries the watch's start")
    if args.child:
        args.side = args.child
        return child(args)
    from overhead import bootstrap_ci

    store = f"sqlite:///{tempfile.mkdtemp(prefix='wif-watch-cost-')}/mlflow.db"
    ratios, cpu_ratios, starts = [], [], []
    batches = (args.epochs - 2) * -(-args.n_train // 64)  # the steady epochs' batches (batch 64)
    for r in range(args.rounds):
        order = ["bare", "watch"] if r % 2 == 0 else ["watch", "bare"]
        got = {side: one(side, args, store) for side in order}
        # epoch 2 carries the watch's one-time start (MLflow opened after epoch 1): the steady part is epochs 3..E
        with_watch, bare = got["watch"]["steady_s"], got["bare"]["steady_s"]
        ratios.append(with_watch / bare)
        cpu_ratios.append(got["watch"]["steady_cpu_s"] / got["bare"]["steady_cpu_s"])
        starts.append(got["watch"]["start_s"] - got["bare"]["start_s"])
        print(
            f"round {r + 1}: bare {bare:.3f} s, watched {with_watch:.3f} s, ratio {ratios[-1]:.4f}, CPU time "
            f"ratio {cpu_ratios[-1]:.4f} (watch's start {starts[-1]:+.2f} s)",
            flush=True,
        )
        print(
            f"  minor page faults a batch: bare {got['bare']['faults'] / batches:.0f}, watched "
            f"{got['watch']['faults'] / batches:.0f}",
            flush=True,
        )
        print(
            "  CPU s by thread, epochs 3..E: "
            + "; ".join(
                f"{side} " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(got[side]["threads_cpu_s"].items()))
                for side in ("bare", "watch")
            ),
            flush=True,
        )
    med = statistics.median(ratios)
    lo, hi = bootstrap_ci(ratios)
    print(
        f"ratio watched / bare (median of {len(ratios)} paired rounds, epochs 3..{args.epochs}): {med:.4f}, "
        f"95% CI {lo:.4f} to {hi:.4f}  (target: within 1%)"
    )
    print(
        f"the watch's one-time start (MLflow import and run, after epoch 1): median {statistics.median(starts):.2f} s"
    )
    if hi - lo > 0.02:
        print("this machine cannot resolve 1%: the interval is wider than +-1% (run it alone, with more rounds)")
    # What the watch adds to the process's work (its per-batch bookkeeping, the sampler's and the sender's
    # threads): on a machine whose cores the loop keeps busy, what it takes from the loop.
    cpu_med = statistics.median(cpu_ratios)
    cpu_lo, cpu_hi = bootstrap_ci(cpu_ratios)
    print(f"CPU time watched / bare (all threads, same rounds): {cpu_med:.4f}, 95% CI {cpu_lo:.4f} to {cpu_hi:.4f}")
    sampler = _sampler_cpu_pct(store)
    if sampler:
        print(
            f"the watch's sampler thread: median {statistics.median(sampler):.2f}% of one core "
            f"(sampler_cpu_pct of {len(sampler)} runs)"
        )


def _sampler_cpu_pct(store: str) -> List[float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids, "attributes.status = 'FINISHED'") if ids else []
    return [r.data.metrics["sampler_cpu_pct"] for r in runs if "sampler_cpu_pct" in r.data.metrics]


if __name__ == "__main__":
    main()
