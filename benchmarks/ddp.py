"""One process against N data-parallel ranks (trainer.nproc) on this machine, side by side: the job's images/s
and the RAM of its whole process tree (every rank and its workers), from one real sweep into its own store.

    python benchmarks/ddp.py                          # 1 and 2 ranks, tiny model, 2 workers a rank, 4 epochs
    python benchmarks/ddp.py --nproc 1,2,4 --workers 4 --fraction 1.0 --epochs 6

The sizing warning (ranks x (workers + 1) above the usable cores) is printed as the run printed it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from wif.measure.sysinfo import usable_cores

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", default="1,2")
    p.add_argument("--workers", type=int, default=2, help="loader.num_workers of every rank")
    p.add_argument("--fraction", default="0.4")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--model", default="tiny")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wif-ddp-bench-"))
    store = f"sqlite:///{work / 'mlflow.db'}"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": store,
        "WIF_CACHE_DIR": os.environ.get("WIF_CACHE_DIR", str(work)),
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        "preset=smoke",
        f"model={a.model}",
        "device=cpu",
        f"trainer.nproc={a.nproc}",
        f"loader.num_workers={a.workers}",
        f"data.fraction={a.fraction}",
        f"trainer.epochs={a.epochs}",
        "repeat=0",
        "sweep.shuffle=false",
    ]
    print("$", " ".join(cmd[1:]), flush=True)
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(text[-3000:])
    for line in text.splitlines():
        if "WARNING" in line and "trainer.nproc" in line:
            print("warning seen:", line.split(" - ", 1)[-1])
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    runs = {int(r.data.params["trainer.nproc"]): r for r in client.search_runs([exp.experiment_id])}
    print(f"\n{usable_cores()} usable cores; {a.workers} workers a rank; warm-up epoch left out; one run each")
    print(
        f"{'ranks':>5} {'img/s':>8} {'x 1 rank':>8} {'epoch s':>8} {'RSS MB':>8} {'PSS MB':>8} {'x 1 rank':>8} "
        f"{'threads/rank':>12}"
    )
    one = runs[min(runs)].data.metrics
    for n, r in sorted(runs.items()):
        m = r.data.metrics
        print(
            f"{n:>5} {m['throughput_mean_img_s']:>8.0f} "
            f"{m['throughput_mean_img_s'] / one['throughput_mean_img_s']:>8.2f} "
            f"{m['epoch_time_median_s']:>8.3f} {m['ram_peak_rss_mb']:>8.0f} "
            f"{m.get('ram_peak_pss_mb', float('nan')):>8.0f} "
            f"{m.get('ram_peak_pss_mb', float('nan')) / one.get('ram_peak_pss_mb', float('nan')):>8.2f} "
            f"{r.data.tags.get('wif.threads_per_rank', r.data.tags.get('wif.torch_threads', '?')):>12}"
        )
    print(f"\nstore: {store}")


if __name__ == "__main__":
    main()
