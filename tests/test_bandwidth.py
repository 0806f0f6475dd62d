"""wif-bandwidth (the copy rates of this machine), the bytes each run copies per epoch, and the report's copy
cost at the measured rate: the command for real (GPU) and refused (no CUDA), a real train.py run, the pure
function on a constructed frame, and the report with a bandwidth run in its store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, run_train, train_runs
from tests.stores import GPU, log_run, study_store
from wif.config import TransferConfig
from wif.data.loaders import FixedBatches
from wif.data.transfer import StreamPrefetcher, batch_nbytes, copies_from_host, make_transfer, on_device
from wif.report import copycost
from wif.report.report_cli import main as report
from wif.run.training import CappedBatches

IMAGE = 3 * 64 * 64 * 4 + 8  # a float32 3x64x64 image and its int64 label, in bytes


def bandwidth(store: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command as a user runs it (`python -m` needs no reinstall for a new console script)."""
    return subprocess.run(
        [sys.executable, "-m", "wif.tools.bandwidth", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_TRACKING_URI": store, **(env or {})},
    )


# ----------------------------------------------------------------------------- the command
def test_without_cuda_it_says_so_in_one_line_exits_2_and_leaves_the_store_alone(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    proc = bandwidth(f"sqlite:///{db}", env={"CUDA_VISIBLE_DEVICES": ""})  # no device, even on a GPU machine
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "nothing to measure" in lines[0] and "no CUDA device" in lines[0], lines
    assert not db.exists()


def test_bad_input_is_refused_with_exit_2(tmp_path: Path) -> None:
    proc = bandwidth(f"sqlite:///{tmp_path / 'mlflow.db'}", "--repeats", "0")
    assert proc.returncode == 2 and "--repeats=0 must be at least 1" in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_it_measures_and_logs_a_bandwidth_run(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = bandwidth(store, "--sizes-mb", "1,256", "--repeats", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "h2d pinned" in proc.stdout and "best" in proc.stdout
    client = MlflowClient(store)
    exp = client.get_experiment_by_name("who_is_faster")
    [run] = client.search_runs([exp.experiment_id], "tags.`wif.kind` = 'bandwidth'")
    m, tags = run.data.metrics, run.data.tags
    assert run.info.status == "FINISHED"
    assert all(v > 0 for v in m.values()) and len(m) == 2 * 2 * 3  # 2 directions x 2 memories x (2 sizes + best)
    assert m["h2d_pinned_gbps_256mb"] >= m["h2d_pageable_gbps_256mb"]
    assert m["h2d_pinned_best_gbps"] == max(m["h2d_pinned_gbps_1mb"], m["h2d_pinned_gbps_256mb"])
    assert tags["wif.gpu"] not in ("", "none") and tags["wif.gpu_uuid"]  # this process never touches CUDA itself
    assert {"wif.gpu_driver", "wif.cuda", "wif.torch"} <= set(tags)


# ----------------------------------------------------------------------------- the bytes a run copies
def test_copied_bytes_are_counted_only_where_batches_cross_from_the_host() -> None:
    cpu = torch.device("cpu")
    x, y = torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)
    assert batch_nbytes((x, y)) == 4 * 3 * 8 * 8 * 4 + 4 * 8 == batch_nbytes({"x": x, "y": [y]})
    host = [(x, y)]
    fixed = FixedBatches(10, 4, 8, 2, cpu, 0)
    copy = make_transfer(TransferConfig(), cpu)  # transfer=copy
    assert copies_from_host(host, copy) and copies_from_host(StreamPrefetcher(host, cpu), on_device)
    assert not copies_from_host(CappedBatches(fixed, 1), copy)  # data=fixed: made on the device
    assert not copies_from_host(StreamPrefetcher(CappedBatches(fixed, 1), cpu), on_device)
    assert not copies_from_host(host, on_device)  # gpu_resident's transfer: nothing to copy


@pytest.mark.slow
def test_a_training_run_logs_the_bytes_it_copies_per_epoch(tmp_path: Path, store: str, cache_dir: Path) -> None:
    small = ("data.num_train=500", "data.num_test=64")  # the bytes of any number of images: 40 to train on here
    both = ("data=synthetic,fixed", "loader=baseline,gpu_resident")  # one sweep: host data and data made on the device
    proc = run_train(tmp_path, store, cache_dir, "preset=smoke", "data.fraction=0.1", *small, *both)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(store)
    runs = {(r.data.params["data.source"], r.data.tags["wif.loader"]): r for r in train_runs(store, status="FINISHED")}
    streamed = runs[("synthetic", "baseline")]
    expected = int(streamed.data.tags["wif.n_train"]) * IMAGE  # every training image, once per epoch
    history = client.get_metric_history(streamed.info.run_id, "copy_bytes_per_epoch")
    assert [m.value for m in history] == [expected] * 3  # every epoch, the warm-up included
    assert runs[("synthetic", "gpu_resident")].data.metrics["copy_bytes_per_epoch"] == 0
    assert runs[("fixed", "baseline")].data.metrics["copy_bytes_per_epoch"] == 0
    assert runs[("fixed", "gpu_resident")].data.metrics["copy_bytes_per_epoch"] == 0


# ----------------------------------------------------------------------------- the report's copy cost
def test_copy_ms_at_bandwidth_divides_by_the_newest_matching_rate() -> None:
    runs = pd.DataFrame(
        {
            "gpu_uuid": ["U1", "U1", "U9", None, None],
            "gpu": ["H100", "H100", "H100", "none", "H100"],
            "pin_memory": ["True", "False", "True", "False", "True"],
            "copy_bytes_per_epoch": [1e9, 1e9, 2e9, 1e9, None],
        },
        index=[10, 11, 12, 13, 14],
    )
    bw = pd.DataFrame(
        {
            "bw_run_id": ["old", "new", "other"],
            "start_time": [1, 2, 3],
            "gpu": ["H100", "H100", "H100"],
            "gpu_uuid": ["U1", "U1", "U2"],
            "h2d_pinned_best_gbps": [10.0, 50.0, 25.0],
            "h2d_pageable_best_gbps": [5.0, 10.0, 1.0],
        }
    )
    got = copycost.copy_ms_at_bandwidth(runs, bw)
    assert got[10] == pytest.approx(20.0)  # 1 GB at 50 GB/s, the newest run on that very GPU
    assert got[11] == pytest.approx(100.0)  # not pinned: the pageable rate
    assert got[12] == pytest.approx(80.0)  # no run on U9: the newest on the same model of GPU (25 GB/s)
    assert pd.isna(got[13]) and pd.isna(got[14])  # a CPU run; a run that logged no bytes
    assert copycost.COLUMN not in copycost.add_copy_cost(runs, bw.iloc[:0])  # no bandwidth run: nothing added


def test_the_report_shows_copy_cost_only_where_a_bandwidth_run_matches(tmp_path: Path) -> None:
    client, uri, exp_id = study_store(tmp_path)
    for block in range(2):
        for name, pin in (("baseline", "False"), ("pin_nb", "True")):
            run_id = log_run(client, exp_id, name, 0.1, block, 10.0 + block)
            client.log_batch(
                run_id,
                metrics=[Metric("copy_bytes_per_epoch", 4e8, 0, 0), Metric("copy_s", 0.05, 0, 0)],
                params=[Param("loader.pin_memory", pin)],
                tags=[RunTag("wif.gpu_uuid", "GPU-1")],
            )
    assert report(["--tracking-uri", uri, "--out", str(tmp_path / "plain"), "--no-log"]) == 0
    plain = (tmp_path / "plain" / "summary.md").read_text()
    assert "copy ms/epoch" not in plain and "bandwidth" not in plain
    bw = client.create_run(
        exp_id, run_name="bandwidth", tags={"wif.kind": "bandwidth", "wif.gpu": GPU, "wif.gpu_uuid": "GPU-1"}
    ).info.run_id
    client.log_batch(
        bw, metrics=[Metric("h2d_pinned_best_gbps", 40.0, 0, 0), Metric("h2d_pageable_best_gbps", 8.0, 0, 0)]
    )
    client.set_terminated(bw, "FINISHED")
    assert report(["--tracking-uri", uri, "--out", str(tmp_path / "bw"), "--no-log"]) == 0
    s = pd.read_csv(tmp_path / "bw" / "summary.csv").set_index("loader")
    assert s.loc["pin_nb", copycost.COLUMN] == pytest.approx(10.0)  # 0.4 GB at 40 GB/s
    assert s.loc["baseline", copycost.COLUMN] == pytest.approx(50.0)  # at 8 GB/s
    md = (tmp_path / "bw" / "summary.md").read_text()
    assert "| 50 / 10 |" in md and "| 50 / 50 |" in md and "pinned 40.0, pageable 8.0 GB/s" in md
