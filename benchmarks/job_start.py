"""What starting a job costs: wif's per-job overhead against a bare `import torch, torchvision`.

Runs a real smoke multirun of one-epoch jobs, reads each run's `job_overhead_s` (job wall time minus
training, validation and test) from MLflow, and prints its median beside the time a fresh interpreter
needs just to import torch and torchvision. Target: the overhead at most 1 s on a 2-core CPU.

    python benchmarks/job_start.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
JOBS = "loader=baseline,pin,pin_nb,bg,bg_pin,gpu_resident"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="wif-jobstart-"))
    store = f"sqlite:///{work / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(work / "cache")}
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", JOBS, "preset=smoke", "trainer.epochs=1", "repeat=0"]
    subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)

    imports = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, torchvision"], check=True)
        imports.append(time.perf_counter() - t0)

    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    runs = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'")
    overhead = sorted(r.data.metrics["job_overhead_s"] for r in runs)
    print(f"jobs: {len(runs)}; job_overhead_s each: {', '.join(f'{v:.3f}' for v in overhead)}")
    print(f"median job_overhead_s: {statistics.median(overhead):.3f} s (target <= 1 s)")
    print(f"bare 'import torch, torchvision' in a fresh interpreter: {statistics.median(imports):.3f} s")


if __name__ == "__main__":
    main()
