"""`wif.watch(loader)` in real scripts (examples/), run in subprocesses on a real SQLite store: the figures
each epoch logs, the batch structures it counts, the wrappers it sees through, and how its run ends."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import List

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader, TensorDataset

from tests.watching import run_script, watch_runs
from wif.run.loop import samples_in
from wif.watcher.watch import find_dataloader


def history(store: str, run_id: str, key: str) -> List[float]:
    return [m.value for m in sorted(MlflowClient(store).get_metric_history(run_id, key), key=lambda m: m.step)]


def test_samples_are_counted_in_any_batch_structure() -> None:
    x, y = torch.zeros(5, 3), torch.zeros(5)
    assert samples_in((x, y), 1) == 5
    assert samples_in({"name": ["a"] * 5, "image": x}, 1) == 5  # a list of names counts its names
    assert samples_in({"meta": {"id": torch.arange(7)}, "x": x}, 1) == 7
    assert samples_in(torch.tensor(3.0), 9) == 9  # a 0-d tensor has no batch dimension: the fallback


def test_the_dataloader_is_found_inside_a_wrapper() -> None:
    loader = DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2)

    class Prefetch:  # as timm's PrefetchLoader: the DataLoader kept as .loader
        def __init__(self, inner: DataLoader) -> None:
            self.loader, self.mean = inner, torch.zeros(3)

    class Outer:  # a wrapper of a wrapper, under an unusual name
        def __init__(self, inner: object) -> None:
            self.pipeline = inner

    assert find_dataloader(loader) == (None, "", loader)
    wrapped = Prefetch(loader)
    assert find_dataloader(wrapped) == (wrapped, "loader", loader)
    assert find_dataloader(Outer(wrapped))[1:] == ("loader", loader)
    assert find_dataloader([1, 2, 3]) is None


def test_short_epochs_reach_mlflow_batched_and_all_of_them(store: str) -> None:
    """Forty epochs ended within milliseconds: the first goes out at once, the rest wait until the first send's
    CPU is 1% of the time since and go in one call; every step arrives, the last epoch's tag wins. A store that
    refuses is said at close, and nothing raises in the loop."""
    from wif.measure.tracking import PacedSender, Tracker

    tracker = Tracker(store, "paced")
    run = tracker.start_run("r", {}, {}, {})
    sender = PacedSender(tracker, run)
    for step in range(40):
        sender.put(step, {"epoch_time_s": 0.25 + step, "samples": 64.0}, {"wif.n_train": 64 + step})
    assert sender.close() == "" and sender.sends <= 3, sender.sends
    client = MlflowClient(store)
    times = sorted((m.step, m.value) for m in client.get_metric_history(run, "epoch_time_s"))
    assert times == [(step, 0.25 + step) for step in range(40)]
    assert client.get_run(run).data.tags["wif.n_train"] == "103"
    broken = PacedSender(tracker, "no-such-run")
    broken.put(0, {"epoch_time_s": 1.0}, {})
    assert broken.close().startswith("MlflowException")  # said at close; put() never raised


def test_a_data_bound_loop_is_timed_logged_and_said(tmp_path: Path, store: str) -> None:
    """4 ms of sleep an item at 0 workers: the step waits most of each epoch, and the lines say so."""
    done = run_script(tmp_path, store, "train_slow_reads", "--epochs", "3", "--n-train", "128", "--batch-size", "32")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("wif.watch: epoch")]
    assert len(lines) == 3 and all("waited for data" in line for line in lines), done.stderr[-2000:]
    (run,) = watch_runs(store)
    assert run.info.status == "FINISHED"
    assert run.data.params["num_workers"] == "0" and run.data.params["batch_size"] == "32"
    epochs = history(store, run.info.run_id, "epoch_time_s")
    assert len(epochs) == 3 and min(epochs) >= 128 * 0.004  # each item slept 4 ms in the loop's process
    assert history(store, run.info.run_id, "samples") == [128.0] * 3
    assert min(history(store, run.info.run_id, "data_wait_s")) >= 128 * 0.004  # the sleeps are inside next()
    m = run.data.metrics
    assert m["epochs_run"] == 3 and m["ram_peak_rss_mb"] > 50 and m["tree_cpu_s"] >= 0
    assert abs(m["epoch_time_s"] - m["data_wait_s"] - m["compute_s"]) < 1e-6  # the step: between the batches


@pytest.mark.slow
def test_workers_dict_batches_and_a_timm_wrapper(tmp_path: Path, store: str) -> None:
    """Dict batches counted by their images; 2 persistent workers seen by the sampler, and not the watch's own
    `git` (slow here, as in a large repository); timm's PrefetchLoader watched as it is, its DataLoader's
    settings read from inside it."""
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "git").write_text(f'#!/bin/sh\nsleep 1\nexec {shutil.which("git")} "$@"\n')
    (slow / "git").chmod(0o755)
    path = {"PATH": f"{slow}{os.pathsep}{os.environ['PATH']}"}
    done = run_script(tmp_path, store, "train_segment", "--epochs", "2", "--n-train", "64", "--workers", "2", env=path)
    assert done.returncode == 0, done.stderr[-3000:]
    (seg,) = watch_runs(store)
    assert history(store, seg.info.run_id, "samples") == [64.0, 64.0]
    assert seg.data.params["num_workers"] == "2" and seg.data.metrics["workers_peak"] == 2
    pytest.importorskip("timm")
    done = run_script(tmp_path, store, "train_timm_prefetch", "--epochs", "2", "--n-train", "128")
    assert done.returncode == 0, done.stderr[-3000:]
    timm_run = next(r for r in watch_runs(store) if r.info.run_id != seg.info.run_id)
    assert timm_run.data.params["loader"] == "PrefetchLoader" and timm_run.data.params["batch_size"] == "64"
    assert history(store, timm_run.info.run_id, "samples") == [128.0, 128.0]


def test_a_loop_that_raises_ends_its_run_failed_and_watch_0_turns_it_off(tmp_path: Path, store: str) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        "import torch, wif\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2)\n"
        "for epoch in range(3):\n    for (x,) in wif.watch(loader):\n        pass\n"
        "    if epoch == 1:\n        raise ValueError('diverged')\n"
    )
    done = run_script(tmp_path, store, str(script))
    assert done.returncode == 1 and "ValueError: diverged" in done.stderr
    (run,) = watch_runs(store)
    assert run.info.status == "FAILED" and run.data.tags["wif.error"] == "ValueError: diverged"
    assert len(history(store, run.info.run_id, "epoch_time_s")) == 2
    off = run_script(tmp_path, store, str(script), env={"WIF_WATCH": "0"})
    assert "wif.watch" not in off.stderr and len(watch_runs(store)) == 1


def _seeded_loader() -> DataLoader:
    """A loader whose batches depend on everything a rebuild must keep: its sampler's generator, its collate_fn
    and worker_init_fn (which tags each batch with the worker count it saw)."""
    data = TensorDataset(torch.arange(40))
    return DataLoader(
        data,
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(7),
        collate_fn=_collate,
        worker_init_fn=_init_worker,
        drop_last=True,
    )


def _collate(items: list) -> dict:
    info = torch.utils.data.get_worker_info()
    return {"x": torch.stack([i[0] for i in items]), "workers": info.num_workers if info else 0}


def _init_worker(worker_id: int) -> None:
    torch.manual_seed(1234 + worker_id)


def test_a_rebuilt_loader_keeps_what_decides_its_batches() -> None:
    from wif.watcher.found import rebuild

    before = [b["x"].tolist() for b in _seeded_loader()]
    loader = rebuild(_seeded_loader(), {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4})
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 4)
    assert loader.worker_init_fn is _init_worker and loader.drop_last
    batches = list(loader)
    assert [b["x"].tolist() for b in batches] == before  # the same generator, sampler and order
    assert {b["workers"] for b in batches} == {2}  # the user's collate_fn ran in the new workers


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_watch_logs_vram_peaks_and_still_splits_the_epoch(tmp_path: Path, store: str) -> None:
    """The classifier trains on CUDA (pinned batches, non_blocking copies): torch's and NVML's VRAM peaks are
    logged, and the epoch is still the wait in next() plus the step (synchronized at the epoch's end only)."""
    done = run_script(tmp_path, store, "train_classify", "--epochs", "2", "--n-train", "256", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = watch_runs(store)
    m = run.data.metrics
    assert run.data.tags["wif.device"] == "cuda" and m["vram_peak_allocated_mb"] > 0
    assert "vram_peak_device_mb" in m or "vram_peak_reserved_mb" in m
    assert abs(m["epoch_time_s"] - m["data_wait_s"] - m["compute_s"]) < 1e-6
