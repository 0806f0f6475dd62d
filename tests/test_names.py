"""What lands in MLflow keeps its names: a smoke run of train.py, a watched script and `wif.time_epochs`,
each in a subprocess on a real SQLite store, log the metric, param and tag names they logged at 865fbd9
(tests/data/mlflow_names_865fbd9.json, taken before one account of an epoch, wif.measure.epochs, replaced
the three copies), plus the names that account added on purpose (ADDED). Any other name gained or lost
fails here. On a CPU: a GPU run logs its device's figures beside these, and the test skips there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, new_store

pytestmark = pytest.mark.slow
BEFORE = Path(__file__).parent / "data" / "mlflow_names_865fbd9.json"
# One summary everywhere: the study's runs gained the watch's means of the wait and the step, the watch the
# warm-up epoch set apart and the step's share, time_epochs every figure the other two log. A study run's
# config gained sweep.deadline, the time a budgeted auto job ends by, and the sizes of what a run evaluates
# (data.val_images, data.test_images, sweep.eval_images); its validation passes' time is summed apart. The
# watch's windows say where each is (script_epoch, windowed) and what the script's epochs offered. The loader
# gained worker_threads (a row of wif.dataloader_args): each worker's OpenCV and BLAS threads. The watch logs
# the script's own time between its epochs (between_epochs_s), which a pick's speedup counts.
ADDED = {
    "train": {
        "metrics": {"compute_mean_s", "data_wait_mean_s", "val_time_total_s", "host_idle_cores"},
        "per_epoch": {"host_idle_cores"},
        "params": {
            "sweep.deadline",
            "data.val_images",
            "data.test_images",
            "sweep.eval_images",
            "loader.worker_threads",
        },
    },
    "watch": {
        "metrics": {
            "compute_share",
            "warmup_epoch_time_s",
            "script_epoch",
            "windowed",
            "script_epochs",
            "script_batches",
            "host_idle_cores",
            "between_epochs_s",
        },
        "per_epoch": {"compute_share", "script_epoch", "windowed", "host_idle_cores"},
        "params": {"worker_threads"},
    },
    "user": {
        "metrics": {
            "compute_mean_s",
            "compute_share",
            "compute_threads",
            "copy_s",
            "data_wait_mean_s",
            "data_wait_share",
            "epochs_run",
            "first_batch_mean_s",
            "throughput_img_s",
            "warmup_epoch_time_s",
        },
        "per_epoch": {"compute_share", "compute_threads", "copy_s", "data_wait_share", "throughput_img_s"},
    },
}
TIME_EPOCHS = (
    "import torch, wif\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "ds = TensorDataset(torch.randn(64, 3), torch.zeros(64))\n"
    "wif.time_epochs(DataLoader(ds, batch_size=8), lambda b: None, 3, mlflow_experiment='user', run_name='api')\n"
)


def names(store: str) -> Dict[str, Dict[str, List[str]]]:
    """Per run kind: its metric names, those logged every epoch, its param and tag names."""
    client = MlflowClient(store)
    out = {}
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id]):
            steps = [k for k in run.data.metrics if len(client.get_metric_history(run.info.run_id, k)) > 1]
            out[run.data.tags.get("wif.kind", "?")] = {
                "metrics": sorted(run.data.metrics),
                "per_epoch": sorted(steps),
                "params": sorted(run.data.params),
                "tags": sorted(run.data.tags),
            }
    return out


def test_the_study_the_watch_and_time_epochs_log_the_names_they_did(tmp_path: Path, cache_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the names are a CPU run's: on CUDA the runs log their device's figures beside them")
    store = new_store(tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_URI": store, "WIF_CACHE_DIR": str(cache_dir)}
    # The three side by side: names, not timings, are checked, and each process spends seconds on its imports.
    started = [
        subprocess.Popen(
            [sys.executable, *command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for command, cwd in (
            ([str(ROOT / "train.py"), "preset=smoke"], tmp_path),
            (["-m", "examples.train_classify", "--epochs", "3", "--workers", "0"], ROOT),
            (["-c", TIME_EPOCHS], tmp_path),
        )
    ]
    for proc in started:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    before = json.loads(BEFORE.read_text())
    want = {
        kind: {part: sorted(set(listed) | ADDED.get(kind, {}).get(part, set())) for part, listed in parts.items()}
        for kind, parts in before.items()
    }
    got = names(store)
    differ = {
        f"{kind} {part}": {
            "lost": sorted(set(listed) - set(got[kind][part])),
            "new": sorted(set(got[kind][part]) - set(listed)),
        }
        for kind, parts in want.items()
        for part, listed in parts.items()
        if kind in got and set(listed) != set(got[kind][part])
    }
    assert set(got) == set(want) and differ == {}
