"""The loader engines side by side on decode-bound data: images/s each engine feeds, DALI beside the others.

Each engine runs the real `train.py` in loader-only mode (no model: the loader alone, timed as training
times it) on data=encoded at the same worker count, one after the other in rounds with the order rotated,
so drift on a shared machine hits all alike. Prints each engine's median images/s over the measured epochs
and its ratio to DataLoader's.

    python benchmarks/engines.py [--workers 2] [--rounds 2] [--fraction 0.4] [--engines dataloader,spdl,...]

DALI's CPU path is not what DALI is for (nvJPEG on a GPU is); on a CPU it shows whether its own threads
decode as fast as the others' workers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
ENGINES = "dataloader,spdl,nodes_threads,nodes_procs,dali"


def run(engine: str, args: argparse.Namespace, store: str, work: Path, repeat: int) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        "preset=smoke",
        "data=encoded",
        f"data.fraction={args.fraction}",
        "trainer.mode=loader_only",
        "trainer.epochs=4",
        "loader=pin_nb_w4_pf2",
        f"loader.num_workers={args.workers}",
        f"engine={engine}",
        f"repeat={repeat}",
        "progress=false",
    ]
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{engine}: train.py failed\n{proc.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.4)
    parser.add_argument("--engines", default=ENGINES)
    args = parser.parse_args()
    engines = args.engines.split(",")
    work = Path(tempfile.mkdtemp(prefix="wif-engines-"))
    store = f"sqlite:///{work / 'mlflow.db'}"
    for r in range(args.rounds):
        for engine in engines[r % len(engines) :] + engines[: r % len(engines)]:
            run(engine, args, store, work, r)
    client = MlflowClient(store)
    rates = {e: [] for e in engines}
    for run_ in client.search_runs(
        [client.get_experiment_by_name("who_is_faster").experiment_id], "tags.`wif.kind` = 'loader'"
    ):
        history = client.get_metric_history(run_.info.run_id, "throughput_img_s")
        rates[run_.data.tags["wif.engine"]] += [h.value for h in history if h.step >= 1]  # epoch 0: warm-up
    base = statistics.median(rates["dataloader"]) if rates.get("dataloader") else None
    print(f"data=encoded, {args.workers} workers/threads, loader-only, {args.rounds} rounds x 3 measured epochs")
    for engine in engines:
        rate = statistics.median(rates[engine])
        ratio = f"  {rate / base:.2f}x DataLoader" if base else ""
        print(f"{engine:14s} {rate:8.0f} images/s{ratio}")


if __name__ == "__main__":
    main()
